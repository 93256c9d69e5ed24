"""Stage 3 of SWEET-RL: a step-level critic that reads the solution c, trained with a Bradley-Terry loss.

    python critic.py runs/backend_train.scored.jsonl          # -> runs/backend_train.critic/

Reads scored trajectories (evaluate.py's output, or an official ColBench offline file with rewards). Two
trajectories of one task whose rewards differ make a pair. The critic is a causal LM that reads c (the
task's reference solution, never shown to the agent) and then what the agent saw: its prompt, which states
the turn budget the trajectory was played under, and the dialogue. Its advantage for an agent
turn is the mean log-ratio of the turn's tokens against its own frozen initial weights π_ref (Eq. 3);
training ranks the two trajectories of each pair by their summed advantages (Eq. 2). Writes the critic
folder: the checkpoint, args.json, log.jsonl (a line per step), metrics.json (held-out pair accuracy)
and advantages.jsonl (each held-out turn's advantage). policy.py imports `load_critic` and
`score_candidates` from here. Departures from the paper: docs/DEPARTURES.md.
"""
import argparse
import dataclasses
import json
import math
import os
import random
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from colbench import distributed
from colbench.cli import (at_least, fail, fraction_or_zero, non_negative_float, non_negative_int, positive_float,
                          positive_int, trajectories_or_fail)
from colbench.data import default_output, succeeded, task_kind, write_jsonl
from colbench.env import agent_messages, turn_budget
from colbench.fast_logps import shared_prefix_logps, shares_prefix
from colbench.models import (DTYPES, SCHEDULES, adamw, autocast, compute_dtype, describe_dtype, load_model,
                             resolve_model, sequence_logps, tokenize_turns)
from colbench.stats import bootstrap_mean_ci, pair_outcomes

PAIRINGS = ("all", "official")  # the rules of preference_pairs
MIN_LENGTH = 32  # --max-length floor: fewer tokens cannot hold the prompt's chat markup, let alone a dialogue

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (each line with a `reward`), e.g. evaluate.py's output")
parser.add_argument("--out", help="critic folder to write (default runs/<stem>.critic)")
parser.add_argument("--model", default="embedded", help="initial critic and π_ref: model folder, hub id or 'embedded'")
parser.add_argument("--beta", type=positive_float, default=0.1, help="β of the Bradley-Terry loss (Eq. 2)")
parser.add_argument("--lr", type=positive_float, default=1e-4, help="AdamW learning rate")
parser.add_argument("--epochs", type=positive_int, default=1, help="passes over the training pairs")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs per optimizer step, at least: a task's pairs stay in one step (they share its "
                         "trajectories, whose log-probs are computed once)")
parser.add_argument("--eval-fraction", type=fraction_or_zero, default=0.5, help="fraction of the paired tasks held out")
parser.add_argument("--min-reward-gap", type=non_negative_float, default=0.0,
                    help="pair two trajectories of a task only when their rewards differ by at least this")
parser.add_argument("--pairing", default="all", choices=PAIRINGS,
                    help="all (any two trajectories of a task whose rewards differ) or official (see preference_pairs)")
parser.add_argument("--max-length", type=at_least(MIN_LENGTH), default=1024,
                    help="tokens per critic sequence at most; the oldest turns go first")
parser.add_argument("--no-solution", action="store_true",
                    help="leave out the solution c (ablation: w/o training-time information)")
parser.add_argument("--no-normalize", action="store_true",
                    help="sum over a turn's tokens instead of averaging (ablation: w/o normalization)")
parser.add_argument("--trajectory-score", default="token-mean", choices=("turn-sum", "token-mean"),
                    help="a trajectory's score in Eq. 2: turn-sum, the paper's sum of turn advantages, or "
                         "token-mean, the official code's mean over all its agent tokens")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, cosine decay to 0.1x the LR)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="forward passes; auto: bf16 autocast where the hardware computes bf16 natively, else fp32")
parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for the split, the pair order and the model")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass to save memory")
scale.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW states across the processes (FSDP2)")

SOLUTION_HEADER = "Reference solution (shown to you, never to the assistant):\n"


# ---------------------------------------------------------------- the critic's view of a dialogue

def critic_messages(task, dialogue, max_turns, use_solution=True):
    """What the agent saw (its system prompt, the budget of `max_turns` turns included, then the dialogue),
    with the solution c put before the system prompt when `use_solution`."""
    messages = agent_messages(task, dialogue, max_turns)
    if use_solution:
        c = SOLUTION_HEADER + task["ground_truth"].strip() + "\n\n"
        messages[0] = {"role": "system", "content": c + messages[0]["content"]}
    return messages


def fit_to_length(tokenizer, task, dialogue, max_turns, use_solution, max_length):
    """(ids, agent-turn spans, agent turns dropped, what was cut or '') of the critic's view, cut to
    `max_length` tokens: the oldest exchanges (an agent turn and the human's reply to it) go first. The
    problem and c always stay; a dialogue still too long with one agent turn left is kept whole."""
    dropped = 0
    while True:
        ids, spans = tokenize_turns(tokenizer, critic_messages(task, dialogue, max_turns, use_solution))
        agent_turns = [i for i, turn in enumerate(dialogue) if turn["role"] == "assistant"]
        if len(ids) <= max_length or len(agent_turns) < 2:
            cuts = [f"dropped the oldest {dropped} agent turn(s)"] if dropped else []
            if len(ids) > max_length:
                cuts.append(f"still {len(ids)} tokens, kept whole")
            return ids, spans, dropped, ", ".join(cuts)
        first = agent_turns[0]
        reply = first + 1 < len(dialogue) and dialogue[first + 1]["role"] == "user"
        dialogue, dropped = dialogue[:first] + dialogue[first + 1 + reply:], dropped + 1


def key(trajectory):
    return trajectory["task_id"], trajectory["sample_idx"]


def encode(tokenizer, trajectories, use_solution, max_length):
    """{trajectory key: view}, each trajectory tokenized once as the critic sees it: the token ids, the
    [start, end) token spans of the agent turns, and the number of the first turn kept."""
    views, cut = {}, 0
    for t in trajectories:
        ids, spans, dropped, note = fit_to_length(tokenizer, t["task"], t["dialogue_history"], turn_budget(t),
                                                  use_solution, max_length)
        views[key(t)] = {"ids": ids, "spans": spans, "first_turn": dropped}
        if note:
            cut += 1
            if cut <= 5:
                print(f"warning: {t['task_id']}/{t['sample_idx']} is longer than --max-length {max_length}: {note}")
    if cut:
        print(f"warning: {cut} of {len(trajectories)} dialogues were cut to --max-length {max_length} tokens")
    return views


# --- the SWEET-RL part: the advantage (Eq. 3) and the Bradley-Terry loss (Eq. 2) ----------------

def turn_advantages(critic_logps, reference_logps, spans, normalize=True):
    """Eq. 3: A_t = (1/L_t) Σ_l [log π_θ(a_t^l | o_t, a_t^<l, c) − log π_ref(a_t^l | o_t, a_t^<l, c)].
    critic_logps, reference_logps: [seq - 1], entry i - 1 is token i's log-prob; spans: agent turn
    t's tokens are [start, end). normalize=False sums over the tokens (w/o normalization)."""
    log_ratio = critic_logps - reference_logps                        # [seq - 1]
    per_turn = [log_ratio[start - 1:end - 1] for start, end in spans]  # L_t entries each
    return torch.stack([turn.mean() if normalize else turn.sum() for turn in per_turn])  # [turns]


def trajectory_scores(logps, reference, views, keys, normalize=True, score="turn-sum"):
    """Each trajectory's score in Eq. 2: [len(keys)]. logps, reference: {key: [seq - 1]}. turn-sum, the
    paper's: Σ_t A_t. token-mean, the official code's: one mean of the log-ratio over all the agent tokens,
    Σ_t (L_t / L) A_t. normalize=False (w/o normalization) sums over the tokens either way."""
    scores = []
    for k in keys:
        advantages = turn_advantages(logps[k], reference[k], views[k]["spans"], normalize)  # [turns]
        if score == "token-mean" and normalize:
            lengths = advantages.new_tensor([end - start for start, end in views[k]["spans"]])  # L_t
            advantages = advantages * lengths / lengths.sum()
        scores.append(advantages.sum())
    return torch.stack(scores)


def bradley_terry_loss(chosen_scores, rejected_scores, beta):
    """Eq. 2: L = −log σ(β Σ_t A_t⁺ − β Σ_t A_t⁻). chosen_scores, rejected_scores: [pairs], each a
    trajectory's Σ_t A_t. Returns the mean loss over the pairs (a scalar)."""
    return -F.logsigmoid(beta * (chosen_scores - rejected_scores)).mean()


# ---------------------------------------------------------------- the data: pairs of trajectories

OFFICIAL_FRONTEND_GAP = 0.1  # the official frontend scripts skip pairs whose CLIP rewards are closer


def preference_pairs(trajectories, min_reward_gap, pairing="all"):
    """[(chosen, rejected)]: trajectories of the same task whose rewards differ by at least
    `min_reward_gap` (and differ at all), chosen = higher reward. Ordered by task, then sample_idx.

    pairing 'all' (the default): every two trajectories of a task whose rewards differ; k samples of
    a task give up to k(k-1)/2 pairs, failed tasks included (a partial pass beats a total failure).
    pairing 'official', the official sweet_rl scripts' rule: a backend task gives pairs only when one
    of its trajectories succeeded, and then only its best one (the lowest sample_idx among equals)
    against each worse one, k - 1 pairs at most; frontend pairs are 'all' pairs whose rewards differ
    by at least 0.1."""
    by_task = {}
    for trajectory in trajectories:
        by_task.setdefault(trajectory["task_id"], []).append(trajectory)
    pairs = []
    for group in by_task.values():
        group = sorted(group, key=lambda t: t["sample_idx"])
        smallest_gap = min_reward_gap
        if pairing == "official" and task_kind(group[0]["task"]) == "backend":
            if not any(succeeded(t) for t in group):
                continue
            best = max(group, key=lambda t: float(t["reward"]))  # max keeps the first of equals
            candidates = [(best, other) for other in group if other is not best]
        else:
            if pairing == "official":
                smallest_gap = max(min_reward_gap, OFFICIAL_FRONTEND_GAP)
            candidates = [(first, second) for i, first in enumerate(group) for second in group[i + 1:]]
        for first, second in candidates:
            gap = float(first["reward"]) - float(second["reward"])
            if gap != 0 and abs(gap) >= smallest_gap:
                pairs.append((first, second) if gap > 0 else (second, first))
    return pairs


def split_by_task(pairs, eval_fraction, rng):
    """(train pairs, held-out pairs): the pairs of a random `eval_fraction` of the paired tasks are held
    out, so that no held-out task is seen in training. A fraction above 0 holds out one task at least,
    and leaves one at least to train on."""
    tasks = list(dict.fromkeys(chosen["task_id"] for chosen, _ in pairs))
    rng.shuffle(tasks)
    n_eval = 0
    if eval_fraction > 0:
        n_eval = min(max(1, round(eval_fraction * len(tasks))), len(tasks) - 1)
    eval_tasks = set(tasks[:n_eval])
    return ([pair for pair in pairs if pair[0]["task_id"] not in eval_tasks],
            [pair for pair in pairs if pair[0]["task_id"] in eval_tasks])


def task_batches(task_ids, pairs_of, batch_size):
    """Consecutive tasks grouped into batches of at least `batch_size` pairs (a task's pairs stay together)."""
    batches, batch, count = [], [], 0
    for task_id in task_ids:
        batch.append(task_id)
        count += len(pairs_of[task_id])
        if count >= batch_size:
            batches.append(batch)
            batch, count = [], 0
    return batches + [batch] if batch else batches


def by_task(keys):
    """{task_id: [trajectory keys]}, in the order given."""
    grouped = {}
    for task_id, sample_idx in keys:
        grouped.setdefault(task_id, []).append((task_id, sample_idx))
    return grouped


# ---------------------------------------------------------------- log-probs of a task's trajectories

def task_logps(model, views, keys, share_prefix=True):
    """{key: [len - 1] token log-probs} of one task's trajectories. The plain way: a forward pass each.
    The fast way (share_prefix): the beginning they all share (system prompt, c, the problem) is encoded
    once and its KV cache serves each (colbench.fast_logps.shared_prefix_logps; a test holds the two equal)."""
    sequences = [views[k]["ids"] for k in keys]
    if not share_prefix:
        return {k: sequence_logps(model, [ids])[0] for k, ids in zip(keys, sequences)}
    first_scored = min(views[k]["spans"][0][0] for k in keys)  # the first agent token of any of them
    logps, _ = shared_prefix_logps(model, sequences, first_scored)
    return dict(zip(keys, logps))


@torch.no_grad()
def frozen_logps(model, views, keys_of, dtype, share_prefix, desc):
    """task_logps of the trajectories of each task ({task_id: keys}), without gradients."""
    model.eval()
    mine = []
    for task_id, weight in tqdm(list(distributed.share(sorted(keys_of))), desc=desc, unit="task"):  # torchrun: a share
        with autocast(model.device, dtype):
            logps = task_logps(model, views, keys_of[task_id], share_prefix)
        if weight:  # torchrun: weight 0 marks a padding pass
            mine += logps.items()
    return {k: logps.to(model.device) for k, logps in distributed.gather(mine)}  # torchrun: every share


# ---------------------------------------------------------------- training and held-out evaluation

def train(model, views, reference, train_pairs, args, rng, dtype, log_path):
    """AdamW over batches of whole tasks, in a new random order each epoch; a log line per step.
    `model` is as distributed.wrap returned it. Returns the number of steps."""
    pairs_of = {}  # task_id -> its training pairs
    for pair in train_pairs:
        pairs_of.setdefault(pair[0]["task_id"], []).append(pair)
    epochs = []  # each epoch's batches: whole tasks, in a new random order
    for _ in range(args.epochs):
        order = list(pairs_of)
        rng.shuffle(order)
        epochs.append(task_batches(order, pairs_of, args.batch_size))
    optimizer, schedule = adamw(model, args.lr, sum(map(len, epochs)), args.lr_schedule)
    keys_of, normalize, device = by_task(views), not args.no_normalize, next(model.parameters()).device
    step = 0
    with open(log_path if distributed.is_main() else os.devnull, "w") as log:
        for epoch, batches in enumerate(epochs, 1):
            for number, batch in enumerate(batches, 1):
                started, scored = time.time(), []
                batch_pairs = sum(len(pairs_of[task_id]) for task_id in batch)
                model.train()
                optimizer.zero_grad()
                for task_id, weight in distributed.share(batch, model):  # torchrun: this process's tasks
                    pairs = pairs_of[task_id]
                    with autocast(device, dtype):
                        logps = task_logps(model, views, keys_of[task_id], shares_prefix(args))
                    # --- SWEET-RL: each trajectory's Σ_t A_t (Eq. 3), the Bradley-Terry loss on the pairs (Eq. 2)
                    chosen = trajectory_scores(logps, reference, views, [key(c) for c, _ in pairs], normalize,
                                               args.trajectory_score)
                    rejected = trajectory_scores(logps, reference, views, [key(r) for _, r in pairs], normalize,
                                                 args.trajectory_score)
                    loss = bradley_terry_loss(chosen, rejected, args.beta) * len(pairs) / batch_pairs
                    (loss * weight).backward()  # gradients add up over the batch's tasks
                    if weight:
                        tokens = sum(len(views[k]["ids"]) for k in keys_of[task_id]) / len(pairs)
                        scored += [(c, r, tokens) for c, r in zip(chosen.tolist(), rejected.tolist())]
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                step += 1
                record = dict(step=step, epoch=epoch, **step_statistics(distributed.gather(scored), args.beta,
                                                                        time.time() - started))
                log.write(json.dumps(record) + "\n")
                log.flush()
                print(f"step {step} (epoch {epoch}/{args.epochs}, batch {number}/{len(batches)}) | "
                      f"loss {record['loss']:.4f} | pair acc {record['pair_accuracy']:.2f} | "
                      f"margin {record['margin']:+.4f} | chosen {record['chosen_score']:+.4f} "
                      f"rejected {record['rejected_score']:+.4f} | {record['tokens_per_s']:.0f} tok/s", flush=True)
    return step


def step_statistics(scored, beta, seconds):
    """The log line's numbers of a step, from its pairs' (chosen score, rejected score, tokens per pair)."""
    chosen, rejected = torch.tensor([c for c, _, _ in scored]), torch.tensor([r for _, r, _ in scored])
    margins = chosen - rejected
    return {"loss": bradley_terry_loss(chosen, rejected, beta).item(),
            "pair_accuracy": sum(pair_outcomes(margins.tolist())) / len(scored), "margin": margins.mean().item(),
            "chosen_score": chosen.mean().item(), "rejected_score": rejected.mean().item(),
            "tokens_per_s": sum(n for _, _, n in scored) / seconds}


def evaluate(model, views, reference, eval_pairs, args, dtype):
    """Held-out pair accuracy (ties count half) with its 95% interval (tasks resampled), mean margin,
    loss, each pair's margin, task and sample indices (chosen, rejected); and {trajectory key: its turn
    advantages} of the held-out trajectories."""
    normalize = not args.no_normalize
    held_out = by_task(dict.fromkeys(key(t) for pair in eval_pairs for t in pair))
    logps = frozen_logps(model, views, held_out, dtype, shares_prefix(args), "held-out log-probs")
    advantages = {k: turn_advantages(logps[k], reference[k], views[k]["spans"], normalize) for k in logps}
    chosen = trajectory_scores(logps, reference, views, [key(c) for c, _ in eval_pairs], normalize,
                               args.trajectory_score)
    rejected = trajectory_scores(logps, reference, views, [key(r) for _, r in eval_pairs], normalize,
                                 args.trajectory_score)
    margins = (chosen - rejected).tolist()
    outcomes = {}  # task_id -> the outcome of each of its pairs, for the task bootstrap
    for (chosen_trajectory, _), outcome in zip(eval_pairs, pair_outcomes(margins)):
        outcomes.setdefault(chosen_trajectory["task_id"], []).append(outcome)
    metrics = {"pair_accuracy": sum(pair_outcomes(margins)) / len(margins),
               "pair_accuracy_ci95": list(bootstrap_mean_ci(outcomes)), "mean_margin": sum(margins) / len(margins),
               "margins": margins, "pair_task_ids": [c["task_id"] for c, _ in eval_pairs],
               "pair_samples": [[c["sample_idx"], r["sample_idx"]] for c, r in eval_pairs],
               "loss": bradley_terry_loss(chosen, rejected, args.beta).item()}
    return metrics, advantages


# ---------------------------------------------------------------- the critic as policy.py uses it

@dataclasses.dataclass
class Critic:
    model: torch.nn.Module            # the trained critic π_θ, frozen
    reference_model: torch.nn.Module  # π_ref: the initial weights it was trained from
    tokenizer: object
    use_solution: bool = True
    normalize: bool = True
    dtype: torch.dtype = torch.float32  # of the forward passes (fp32 weights, autocast to bf16 as in training)


def load_critic(critic_dir, device=None, dtype=torch.float32):
    """A trained critic folder -> Critic scoring in `dtype`; π_ref is rebuilt from the model named
    in its args.json. Weights stay fp32: the trained critic differs from π_ref by updates too small
    for bf16 weights to hold."""
    with open(os.path.join(critic_dir, "args.json")) as f:
        saved = json.load(f)
    model, tokenizer = load_model(critic_dir, device=device, dtype=torch.float32)
    base = saved["model_path"] if os.path.isdir(saved["model_path"]) else saved["model"]  # 'embedded' moves machines
    reference_model, _ = load_model(base, device=device, dtype=torch.float32)
    return Critic(model, reference_model, tokenizer, not saved["no_solution"], not saved["no_normalize"], dtype)


@torch.no_grad()
def score_candidates(critic, task, history, max_turns, candidates):
    """A(o_t, a, c) of each candidate reply a to the dialogue `history` (ending with a user turn), played
    under a budget of `max_turns`.
    The shared prefix is encoded once by the critic and once by π_ref; its KV cache serves all
    candidates in one batch. Equals scoring each full sequence on its own, up to float rounding."""
    if not candidates:
        return []
    encoded = [tokenize_turns(critic.tokenizer, critic_messages(
        task, history + [{"role": "assistant", "content": reply}], max_turns, critic.use_solution))
        for reply in candidates]
    sequences = [ids for ids, _ in encoded]
    reply_start = min(spans[-1][0] for _, spans in encoded)
    with autocast(critic.model.device, critic.dtype):
        critic_logps, _ = shared_prefix_logps(critic.model, sequences, reply_start)
        reference_logps, _ = shared_prefix_logps(critic.reference_model, sequences, reply_start)
    return [turn_advantages(critic_row, reference_row, spans[-1:], critic.normalize).item()  # the candidate's turn
            for critic_row, reference_row, (_, spans) in zip(critic_logps, reference_logps, encoded)]


# ---------------------------------------------------------------- the stage

def pairs_split_by_task(trajectories, args, rng):
    """The pairs of the trajectories that have agent turns, split by task: (train pairs, held-out pairs,
    the paired trajectories each once, their counts for metrics.json). No pairs at all is bad input."""
    with_turns = [t for t in trajectories if any(turn["role"] == "assistant" for turn in t["dialogue_history"])]
    pairs = preference_pairs(with_turns, args.min_reward_gap, args.pairing)
    if not pairs:
        fail(f"no pairs: no two trajectories of one task have rewards that differ by at least "
             f"{args.min_reward_gap} under --pairing {args.pairing} ({len(trajectories)} trajectories). "
             "The critic needs contrast.")
    train_pairs, eval_pairs = split_by_task(pairs, args.eval_fraction, rng)
    tasks = {chosen["task_id"] for chosen, _ in pairs}
    eval_tasks = {chosen["task_id"] for chosen, _ in eval_pairs}
    used = list({key(t): t for pair in pairs for t in pair}.values())  # the paired trajectories, each once
    counts = {"tasks": len(tasks), "trajectories": len(used), "pairs": len(pairs),
              "train_tasks": len(tasks) - len(eval_tasks), "train_pairs": len(train_pairs),
              "eval_tasks": len(eval_tasks), "eval_pairs": len(eval_pairs), "eval_task_ids": sorted(eval_tasks)}
    print(f"{len(trajectories)} trajectories, {len(with_turns)} with agent turns; used: {len(tasks)} tasks, "
          f"{len(used)} trajectories, {len(pairs)} pairs -> train {counts['train_tasks']} tasks / "
          f"{len(train_pairs)} pairs, held out {len(eval_tasks)} tasks / {len(eval_pairs)} pairs", flush=True)
    if not eval_pairs:
        print(f"note: --eval-fraction {args.eval_fraction} leaves no held-out task ({len(tasks)} paired tasks): "
              "no held-out accuracy, no advantages.jsonl lines")
    return train_pairs, eval_pairs, used, counts


def save(out, model, weights, tokenizer, args, base_model, metrics, held_out, advantages, views):
    """The critic's folder: the model (loadable by load_critic), args.json with the base model's path
    (π_ref), metrics.json, and advantages.jsonl: a line per agent turn of each held-out trajectory."""
    model.save_pretrained(out, state_dict=weights)
    tokenizer.save_pretrained(out)
    with open(os.path.join(out, "args.json"), "w") as f:
        base_path = os.path.abspath(base_model) if os.path.isdir(base_model) else base_model  # a folder, or a hub id
        json.dump(dict(vars(args), model_path=base_path), f, indent=1)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    write_jsonl(os.path.join(out, "advantages.jsonl"), [
        {"task_id": t["task_id"], "sample_idx": t["sample_idx"], "turn": turn, "advantage": advantage,
         "reward": t["reward"]}
        for t in held_out  # turns dropped by --max-length are not scored: the first kept is `first_turn`
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
    train_pairs, eval_pairs, used, counts = pairs_split_by_task(trajectories, args, rng)

    # The critic π_θ: fp32 master weights, forward passes in `dtype`.
    dtype, why = compute_dtype(args.dtype)
    describe_dtype("critic", dtype, why)
    base_model = resolve_model(args.model)
    model, tokenizer = load_model(base_model, trainable=True)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded (before π_ref: FSDP then computes it as
    # training does). A plain run trains `model` itself.
    trained = distributed.wrap(model, args.fsdp, dtype)
    views = encode(tokenizer, used, not args.no_solution, args.max_length)

    # --- SWEET-RL: π_ref of Eq. 3 is the critic's initial weights, its log-probs computed once
    reference = frozen_logps(model, views, by_task(views), dtype, shares_prefix(args), "π_ref log-probs")
    before = {"pair_accuracy": 0.5, "mean_margin": 0.0, "loss": math.log(2)} if eval_pairs else {}  # θ = π_ref: ties

    os.makedirs(out, exist_ok=True)
    steps = train(trained, views, reference, train_pairs, args, rng, dtype, os.path.join(out, "log.jsonl"))

    after, advantages = evaluate(model, views, reference, eval_pairs, args, dtype) if eval_pairs else ({}, {})
    weights = distributed.full_state_dict(model)  # torchrun --fsdp: every process sends its shards to the first
    if not distributed.is_main():
        return
    held_out = [t for t in used if t["task_id"] in counts["eval_task_ids"]]
    save(out, model, weights, tokenizer, args, base_model, dict(counts, steps=steps, before=before, after=after),
         held_out, advantages, views)
    summary = (f"held-out pair accuracy {before['pair_accuracy']:.3f} -> {after['pair_accuracy']:.3f} "
               f"({len(eval_pairs)} pairs)") if after else "no held-out pairs"
    print(f"done: {steps} steps, {summary} | critic, args.json, metrics.json, advantages.jsonl, log.jsonl -> {out}")


if __name__ == "__main__":
    main(parser.parse_args())
