"""Stage 3 of SWEET-RL: a step-level critic that reads the solution c, trained by Bradley-Terry.

    python critic.py runs/backend_train.scored.jsonl          # -> runs/backend_train.critic/

Reads scored trajectories (evaluate.py's output, or an official ColBench offline file with rewards).
Two trajectories of one task whose rewards differ make a pair. The critic is a causal LM that reads
c (the task's solution, never shown to the agent), then what the agent saw: its prompt, which states
the turn budget, and the dialogue. Its advantage for an agent turn is the mean log-ratio of the
turn's tokens against its own frozen initial weights π_ref (Eq. 3, defined with the critic's
scoring for policy.py in colbench/advantage.py); training ranks the two trajectories of a pair by
their advantages (Eq. 2). Writes the critic folder once whole: the checkpoint, args.json, log.jsonl
(a line per step), metrics.json (held-out pair accuracy before and after training) and
advantages.jsonl (each held-out turn's advantage). Departures from the paper: docs/DEPARTURES.md.
"""
import argparse
import json
import os
import random
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from colbench import distributed
from colbench.advantage import critic_views, key, turn_advantages
from colbench.cli import (at_least, fail, fraction_or_zero, non_negative_float, non_negative_int,
                          positive_float, positive_int, trajectories_or_fail)
from colbench.data import (PAIRINGS, default_output, finish_folder, partial_folder,
                           preference_pairs, write_jsonl)
from colbench.fast_logps import shared_prefix_logps, shares_prefix
from colbench.models import (DTYPES, SCHEDULES, adamw, autocast, compute_dtype, describe_dtype,
                             load_model, resolve_model, sequence_logps)
from colbench.stats import bootstrap_mean_ci, pair_outcomes
from colbench.training import save_checkpoint

MIN_LENGTH = 32  # --max-length floor: fewer tokens cannot hold the prompt's chat markup

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (each line with a `reward`)")
parser.add_argument("--out", help="critic folder to write (default runs/<stem>.critic)")
parser.add_argument("--model", default="embedded",
                    help="initial critic and π_ref: model folder, hub id or 'embedded'")
parser.add_argument("--beta", type=positive_float, default=0.1, help="β of the loss (Eq. 2)")
parser.add_argument("--lr", type=positive_float, default=1e-4, help="AdamW learning rate")
parser.add_argument("--epochs", type=positive_int, default=1, help="passes over the training pairs")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs per optimizer step, at least: a task's pairs stay in one step "
                         "(they share its trajectories, whose log-probs are computed once)")
parser.add_argument("--eval-fraction", type=fraction_or_zero, default=0.5,
                    help="fraction of the paired tasks held out")
parser.add_argument("--min-reward-gap", type=non_negative_float, default=0.0,
                    help="pair two trajectories of a task only when their rewards differ by this")
parser.add_argument("--pairing", default="all", choices=PAIRINGS,
                    help="all: any two trajectories of a task whose rewards differ; or official")
parser.add_argument("--max-length", type=at_least(MIN_LENGTH), default=1024,
                    help="tokens per critic sequence at most; the oldest turns go first")
parser.add_argument("--no-solution", action="store_true",
                    help="leave out the solution c (ablation: w/o training-time information)")
parser.add_argument("--no-normalize", action="store_true",
                    help="sum over a turn's tokens instead of averaging (w/o normalization)")
parser.add_argument("--trajectory-score", default="token-mean", choices=("turn-sum", "token-mean"),
                    help="a trajectory's score in Eq. 2: turn-sum, the paper's sum of turn "
                         "advantages, or token-mean, the official code's mean over agent tokens")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, decay to 0.1x)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="forward passes; auto: bf16 where the hardware computes it natively")
parser.add_argument("--seed", type=non_negative_int, default=0,
                    help="seed for the split, the pair order and the model")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass to save memory")
scale.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW states (FSDP2)")


# --- the SWEET-RL part: a trajectory's score from its A_t (Eq. 3), the Bradley-Terry loss (Eq. 2)

def trajectory_scores(logps, reference, views, keys, normalize=True, score="turn-sum"):
    """Each trajectory's score in Eq. 2: [len(keys)]. logps, reference: {key: [seq - 1]}. turn-sum,
    the paper's: Σ_t A_t. token-mean, the official code's: one mean of the log-ratio over all the
    agent tokens, Σ_t (L_t / L) A_t. normalize=False (w/o normalization) sums over the tokens."""
    scores = []
    for k in keys:
        spans = views[k]["spans"]
        advantages = turn_advantages(logps[k], reference[k], spans, normalize)  # [turns]
        if score == "token-mean" and normalize:
            lengths = advantages.new_tensor([end - start for start, end in spans])  # L_t
            advantages = advantages * lengths / lengths.sum()
        scores.append(advantages.sum())
    return torch.stack(scores)


def bradley_terry_loss(chosen_scores, rejected_scores, beta):
    """Eq. 2: L = −log σ(β Σ_t A_t⁺ − β Σ_t A_t⁻). chosen_scores, rejected_scores:
    [pairs], each a trajectory's Σ_t A_t. Returns the mean loss over the pairs (a scalar)."""
    return -F.logsigmoid(beta * (chosen_scores - rejected_scores)).mean()


# ---------------------------------------------------------------- the data: pairs, split by task

def split_by_task(pairs, eval_fraction, rng):
    """(train pairs, held-out pairs): the pairs of a random `eval_fraction` of the paired tasks are
    held out, so that no held-out task is seen in training. A fraction above 0 holds out one task at
    least, and leaves one at least to train on."""
    tasks = list(dict.fromkeys(chosen["task_id"] for chosen, _ in pairs))
    rng.shuffle(tasks)
    n_eval = 0
    if eval_fraction > 0:
        n_eval = min(max(1, round(eval_fraction * len(tasks))), len(tasks) - 1)
    held_out = set(tasks[:n_eval])
    return ([pair for pair in pairs if pair[0]["task_id"] not in held_out],
            [pair for pair in pairs if pair[0]["task_id"] in held_out])


def by_task(items, task_id=lambda item: item[0]):
    """{task_id: [items]}, in the order given: trajectory keys, or pairs with their `task_id`."""
    grouped = {}
    for item in items:
        grouped.setdefault(task_id(item), []).append(item)
    return grouped


def task_batches(task_ids, pairs_of, batch_size):
    """Consecutive tasks grouped into batches of at least `batch_size` pairs (a task's together)."""
    batches, batch, count = [], [], 0
    for task_id in task_ids:
        batch.append(task_id)
        count += len(pairs_of[task_id])
        if count >= batch_size:
            batches.append(batch)
            batch, count = [], 0
    return batches + [batch] if batch else batches


# ---------------------------------------------------------------- a task's trajectories' log-probs

def task_logps(model, views, keys, share_prefix=True):
    """{key: [len - 1] token log-probs} of one task's trajectories. The plain way: a forward pass
    each (models.sequence_logps). The fast way (share_prefix): the beginning they all share (system
    prompt, c, the problem) encoded once, its KV cache serving each (shared_prefix_logps)."""
    sequences = [views[k]["ids"] for k in keys]
    if not share_prefix:
        return {k: sequence_logps(model, [ids])[0] for k, ids in zip(keys, sequences)}
    first_scored = min(views[k]["spans"][0][0] for k in keys)  # the first agent token of any
    return dict(zip(keys, shared_prefix_logps(model, sequences, first_scored)[0]))


@torch.no_grad()
def frozen_logps(model, views, keys_of, dtype, share_prefix, desc):
    """task_logps of the trajectories of each task ({task_id: keys}), without gradients."""
    model.eval()
    mine = []
    shares = list(distributed.share(sorted(keys_of)))  # torchrun: this process's share of the tasks
    for task_id, weight in tqdm(shares, desc=desc, unit="task"):
        with autocast(model.device, dtype):
            logps = task_logps(model, views, keys_of[task_id], share_prefix)
        if weight:  # torchrun: weight 0 marks a padding pass
            mine += logps.items()
    return {k: logps.to(model.device) for k, logps in distributed.gather(mine)}  # torchrun: all


# ---------------------------------------------------------------- training and held-out evaluation

def train(model, views, reference, train_pairs, rng, log_path, dtype, epochs, batch_size, lr,
          lr_schedule, beta, normalize, score, share_prefix):
    """AdamW over batches of whole tasks, in a new random order each epoch; a log line per step.
    `model` is as distributed.wrap returned it; log_path None: no log (a torchrun process other
    than the first). Returns the number of steps."""
    pairs_of = by_task(train_pairs, task_id=lambda pair: pair[0]["task_id"])
    epoch_batches = []  # each epoch's batches: whole tasks, in a new random order
    for _ in range(epochs):
        order = list(pairs_of)
        rng.shuffle(order)
        epoch_batches.append(task_batches(order, pairs_of, batch_size))
    optimizer, schedule = adamw(model, lr, sum(map(len, epoch_batches)), lr_schedule)
    keys_of, device, step = by_task(views), next(model.parameters()).device, 0
    with open(log_path or os.devnull, "w") as log:
        for epoch, batches in enumerate(epoch_batches, 1):
            for number, batch in enumerate(batches, 1):
                started, scored = time.time(), []
                batch_pairs = sum(len(pairs_of[task_id]) for task_id in batch)
                model.train()
                optimizer.zero_grad()
                for task_id, weight in distributed.share(batch, model):  # torchrun: a share
                    pairs = pairs_of[task_id]
                    with autocast(device, dtype):
                        logps = task_logps(model, views, keys_of[task_id], share_prefix)
                    # --- SWEET-RL: each trajectory's score from its A_t (Eq. 3), the loss (Eq. 2)
                    chosen = trajectory_scores(logps, reference, views, [key(c) for c, _ in pairs],
                                               normalize, score)
                    rejected = trajectory_scores(logps, reference, views,
                                                 [key(r) for _, r in pairs], normalize, score)
                    loss = bradley_terry_loss(chosen, rejected, beta) * len(pairs) / batch_pairs
                    (loss * weight).backward()  # gradients add up over the batch's tasks
                    if weight:
                        tokens = sum(len(views[k]["ids"]) for k in keys_of[task_id]) / len(pairs)
                        scored += [(c, r, tokens)
                                   for c, r in zip(chosen.tolist(), rejected.tolist())]
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                step += 1
                where = f"step {step} (epoch {epoch}/{epochs}, batch {number}/{len(batches)})"
                log_scores(log, dict(step=step, epoch=epoch), where, scored, beta, started)
    return step


def log_scores(log, record, where, scored, beta, started):
    """A step's line in log.jsonl and on the terminal: `record` and the statistics of the step's
    pairs, each (chosen score, rejected score, tokens per pair), from every torchrun process."""
    scored = distributed.gather(scored)
    chosen = torch.tensor([c for c, _, _ in scored])
    rejected = torch.tensor([r for _, r, _ in scored])
    margins = chosen - rejected
    record.update(loss=bradley_terry_loss(chosen, rejected, beta).item(),
                  pair_accuracy=sum(pair_outcomes(margins.tolist())) / len(scored),
                  margin=margins.mean().item(), chosen_score=chosen.mean().item(),
                  rejected_score=rejected.mean().item(),
                  tokens_per_s=sum(tokens for _, _, tokens in scored) / (time.time() - started))
    log.write(json.dumps(record) + "\n")
    log.flush()
    print(f"{where} | loss {record['loss']:.4f} | pair acc {record['pair_accuracy']:.2f} | "
          f"margin {record['margin']:+.4f} | chosen {record['chosen_score']:+.4f} rejected "
          f"{record['rejected_score']:+.4f} | {record['tokens_per_s']:.0f} tok/s", flush=True)


def held_out_metrics(logps, reference, views, eval_pairs, beta, normalize, score):
    """The critic whose log-probs are `logps`, on the held-out pairs: pair accuracy (ties count
    half) with its 95% interval (tasks resampled), mean margin, loss, each pair's margin, task and
    sample indices (chosen, rejected); and {trajectory key: its turn advantages}."""
    keys = dict.fromkeys(key(t) for pair in eval_pairs for t in pair)
    advantages = {k: turn_advantages(logps[k], reference[k], views[k]["spans"], normalize)
                  for k in keys}
    chosen = trajectory_scores(logps, reference, views, [key(c) for c, _ in eval_pairs],
                               normalize, score)
    rejected = trajectory_scores(logps, reference, views, [key(r) for _, r in eval_pairs],
                                 normalize, score)
    margins = (chosen - rejected).tolist()
    outcomes = {}  # task_id -> the outcome of each of its pairs, for the task bootstrap
    for (chosen_trajectory, _), outcome in zip(eval_pairs, pair_outcomes(margins)):
        outcomes.setdefault(chosen_trajectory["task_id"], []).append(outcome)
    metrics = {"pair_accuracy": sum(pair_outcomes(margins)) / len(margins),
               "pair_accuracy_ci95": list(bootstrap_mean_ci(outcomes)),
               "mean_margin": sum(margins) / len(margins), "margins": margins,
               "pair_task_ids": [c["task_id"] for c, _ in eval_pairs],
               "pair_samples": [[c["sample_idx"], r["sample_idx"]] for c, r in eval_pairs],
               "loss": bradley_terry_loss(chosen, rejected, beta).item()}
    return metrics, advantages


# ---------------------------------------------------------------- the stage

def pairs_split_by_task(trajectories, min_reward_gap, pairing, eval_fraction, rng):
    """The pairs of the trajectories that have agent turns, split by task: (train pairs, held-out
    pairs, the paired trajectories each once, their counts for metrics.json). No pair: bad input."""
    with_turns = [t for t in trajectories
                  if any(turn["role"] == "assistant" for turn in t["dialogue_history"])]
    pairs = preference_pairs(with_turns, min_reward_gap, pairing)
    if not pairs:
        fail(f"no pairs: no two trajectories of one task have rewards that differ by at least "
             f"{min_reward_gap} under --pairing {pairing} ({len(trajectories)} trajectories). "
             "The critic needs contrast.")
    train_pairs, eval_pairs = split_by_task(pairs, eval_fraction, rng)
    tasks = {chosen["task_id"] for chosen, _ in pairs}
    eval_tasks = {chosen["task_id"] for chosen, _ in eval_pairs}
    used = list({key(t): t for pair in pairs for t in pair}.values())  # paired trajectories, once
    counts = {"tasks": len(tasks), "trajectories": len(used), "pairs": len(pairs),
              "train_tasks": len(tasks) - len(eval_tasks), "train_pairs": len(train_pairs),
              "eval_tasks": len(eval_tasks), "eval_pairs": len(eval_pairs),
              "eval_task_ids": sorted(eval_tasks)}
    print(f"{len(trajectories)} trajectories, {len(with_turns)} with agent turns; used: "
          f"{len(tasks)} tasks, {len(used)} trajectories, {len(pairs)} pairs -> train "
          f"{counts['train_tasks']} tasks / {len(train_pairs)} pairs, held out {len(eval_tasks)} "
          f"tasks / {len(eval_pairs)} pairs", flush=True)
    if not eval_pairs:
        print(f"note: --eval-fraction {eval_fraction} leaves no held-out task ({len(tasks)} paired "
              "tasks): no held-out accuracy, no advantages.jsonl lines")
    return train_pairs, eval_pairs, used, counts


def save(folder, arguments, base_model, metrics, held_out, advantages, views):
    """Beside the checkpoint: args.json, the `arguments` with the base model's path (π_ref, for
    load_critic), metrics.json, and advantages.jsonl: a line per turn of each held-out dialogue."""
    with open(os.path.join(folder, "args.json"), "w") as f:
        base_path = os.path.abspath(base_model) if os.path.isdir(base_model) else base_model
        json.dump(dict(arguments, model_path=base_path), f, indent=1)
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    write_jsonl(os.path.join(folder, "advantages.jsonl"), [
        {"task_id": t["task_id"], "sample_idx": t["sample_idx"], "turn": turn,
         "advantage": advantage, "reward": t["reward"]}
        for t in held_out  # turns dropped by --max-length go unscored: the first kept is first_turn
        for turn, advantage in enumerate(advantages[key(t)].tolist(), views[key(t)]["first_turn"])])


def main(args):
    distributed.init()  # torchrun: join the process group; a plain run is the only process
    out = args.out or default_output(args.scored, ".critic")
    print("critic:", json.dumps(vars(args)), f"-> {out}", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    trajectories = trajectories_or_fail(args.scored, rewards_for="the critic")

    # The data: pairs of trajectories of one task (Eq. 2), held-out tasks apart.
    train_pairs, eval_pairs, used, counts = pairs_split_by_task(
        trajectories, args.min_reward_gap, args.pairing, args.eval_fraction, rng)

    # The critic π_θ: fp32 master weights, forward passes in `dtype`.
    dtype, why = compute_dtype(args.dtype)
    describe_dtype("critic", dtype, why)
    base_model = resolve_model(args.model)
    model, tokenizer = load_model(base_model, trainable=True)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded (before π_ref: FSDP then
    # computes it as training does). A plain run trains `model` itself.
    trained = distributed.wrap(model, args.fsdp, dtype)
    views = critic_views(tokenizer, used, not args.no_solution, args.max_length)  # ids, turn spans
    share_prefix = shares_prefix(args.fsdp, args.gradient_checkpointing)

    # --- SWEET-RL: π_ref of Eq. 3 is the critic's initial weights, its log-probs computed once
    reference = frozen_logps(model, views, by_task(views), dtype, share_prefix, "π_ref log-probs")
    scoring = dict(beta=args.beta, normalize=not args.no_normalize, score=args.trajectory_score)
    before, after, advantages = {}, {}, {}
    if eval_pairs:  # θ = π_ref before training: the held-out evaluation of those log-probs
        before, _ = held_out_metrics(reference, reference, views, eval_pairs, **scoring)

    folder = partial_folder(out) if distributed.is_main() else None  # renamed to `out` once whole
    log_path = folder and os.path.join(folder, "log.jsonl")
    steps = train(trained, views, reference, train_pairs, rng, log_path, dtype, args.epochs,
                  args.batch_size, args.lr, args.lr_schedule, **scoring, share_prefix=share_prefix)

    if eval_pairs:
        held_out_keys = by_task(dict.fromkeys(key(t) for pair in eval_pairs for t in pair))
        logps = frozen_logps(model, views, held_out_keys, dtype, share_prefix, "held-out log-probs")
        after, advantages = held_out_metrics(logps, reference, views, eval_pairs, **scoring)
    if not save_checkpoint(folder, model, tokenizer):  # torchrun: only the first process writes
        return
    held_out = [t for t in used if t["task_id"] in counts["eval_task_ids"]]
    metrics = dict(counts, steps=steps, before=before, after=after)
    save(folder, vars(args), base_model, metrics, held_out, advantages, views)
    finish_folder(folder, out)
    summary = "no held-out pairs"
    if after:
        summary = (f"held-out pair accuracy {before['pair_accuracy']:.3f} -> "
                   f"{after['pair_accuracy']:.3f} ({len(eval_pairs)} pairs)")
    print(f"done: {steps} steps, {summary} | critic, args.json, metrics.json, advantages.jsonl, "
          f"log.jsonl -> {out}")


if __name__ == "__main__":
    main(parser.parse_args())
