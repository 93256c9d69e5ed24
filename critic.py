"""Stage 3 of SWEET-RL: a step-level critic trained with a Bradley-Terry loss, shown the reference solution.

    python critic.py runs/backend_train.scored.jsonl                 # -> runs/backend_train.critic/

Input: scored trajectories (evaluate.py's output, or an official ColBench offline file that has a
`reward` on each line). Two trajectories of one task whose rewards differ make a pair, the
higher-reward one being chosen. The critic is a causal LM, with its own LM head and no value head.
It reads the reference solution c, which the agent never saw, then the agent's system prompt and
the dialogue. Its advantage for agent turn t is a log-ratio against its own frozen initial weights
π_ref, averaged over the turn's tokens (paper Eq. 3):

    A(o_t, a_t, c) = mean over the tokens l of a_t of [log π_θ(a_t^l | o_t, a_t^<l, c) − log π_ref(a_t^l | ...)]

Training makes the sum of a trajectory's advantages rank the chosen one above the rejected one
(Eq. 2). Written to the critic folder (--out): the critic as a Hugging Face checkpoint, args.json,
log.jsonl (one line per step), metrics.json (held-out pair accuracy before and after training),
and advantages.jsonl (the advantage of each turn of each held-out trajectory: which turn the critic
credits or blames). policy.py imports `load_critic`, `score_candidates` (a candidate reply's advantage,
the shared dialogue encoded once) and `preference_pairs` (the pairing rule) from here.

Where this departs from the paper or the official code:
- Each turn's advantage is a mean over that turn's tokens, as in Eq. 3. The official code takes one
  mean over all the agent tokens of a trajectory.
- Defaults suit SmolLM2-135M on a CPU: lr 2e-5 and 2 epochs. The paper used lr 2e-7 and 4 epochs
  for 8B models. Master weights stay fp32; the forward pass runs under bf16 autocast where the
  hardware computes bf16 natively (--dtype auto), else in fp32.
- c is put in the system message, ahead of the agent's own system prompt, and the critic tokenizer's
  chat template formats the prompt. The official scripts type out their own prompt string instead.
- π_ref's log-probs come from the initial weights, computed once before training and cached, so
  only one model is held in memory.
- Held-out pairs are split by task: no task has pairs on both sides.
- A dialogue longer than --max-length loses its oldest exchanges first, then the tail of c. A
  warning always says so, and the dropped turns do not count in the score.
- Frontend design tasks (c is an HTML page): this is a text critic over the dialogue, with the
  reference HTML as c. The paper's frontend critic was a vision-language model with a regression
  head.
"""
import argparse
import dataclasses
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from colbench import distributed
from colbench.data import DataError, default_output, load_trajectories
from colbench.env import agent_messages
from colbench.models import (DTYPES, autocast, compute_dtype, default_device, describe_dtype, load_model, resolve_model,
                             shared_prefix_logps, token_logps, tokenize_turns)

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (each line with a `reward`), e.g. evaluate.py's output")
parser.add_argument("--out", help="critic folder to write (default runs/<stem>.critic)")
parser.add_argument("--model", default="embedded", help="initial critic and π_ref: model folder, hub id or 'embedded'")
parser.add_argument("--beta", type=float, default=0.1, help="β of the Bradley-Terry loss (Eq. 2)")
parser.add_argument("--lr", type=float, default=2e-5, help="AdamW learning rate")
parser.add_argument("--epochs", type=int, default=2, help="passes over the training pairs")
parser.add_argument("--batch-size", type=int, default=8, help="pairs per optimizer step (one pair per forward pass)")
parser.add_argument("--eval-fraction", type=float, default=0.1, help="fraction of the paired tasks held out")
parser.add_argument("--min-reward-gap", type=float, default=0.0,
                    help="pair two trajectories of a task only when their rewards differ by at least this (0: any difference)")
parser.add_argument("--max-length", type=int, default=2048, help="tokens per critic sequence at most; the oldest turns go first")
parser.add_argument("--no-reference", action="store_true",
                    help="leave out the reference solution c (ablation: w/o training-time information)")
parser.add_argument("--no-normalize", action="store_true",
                    help="sum over a turn's tokens instead of averaging (ablation: w/o normalization)")
parser.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in the backward pass to save memory")
parser.add_argument("--fsdp", action="store_true",
                    help="under torchrun: shard the weights, gradients and AdamW states across the ranks (FSDP2) instead of DDP replicas")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="forward passes; auto: bf16 autocast where the hardware computes bf16 natively, else fp32")
parser.add_argument("--seed", type=int, default=0, help="seed for the split, the pair order and the model")

REFERENCE_HEADER = "Reference solution (shown to you, never to the assistant):\n"


# ---------------------------------------------------------------- the critic's view of a dialogue

def critic_messages(task, dialogue, use_reference=True):
    """The critic's prompt: one system message holding the reference solution c (when
    `use_reference`) followed by the agent's system prompt, then the dialogue turns."""
    messages = agent_messages(task, dialogue)
    if use_reference:
        c = REFERENCE_HEADER + task["ground_truth"].strip() + "\n\n"
        messages[0] = {"role": "system", "content": c + messages[0]["content"]}
    return messages


def fit_to_length(tokenizer, task, dialogue, use_reference, max_length):
    """(ids, agent-turn spans, agent turns dropped, what was cut or '') of the critic's view, cut to
    `max_length` tokens: the oldest (user, agent) exchanges go first, then the tail of c."""
    reference = tokenizer(task["ground_truth"], add_special_tokens=False)["input_ids"]
    dropped, reference_kept = 0, len(reference)
    while True:
        ids, spans = tokenize_turns(tokenizer, critic_messages(task, dialogue, use_reference))
        excess = len(ids) - max_length
        agent_turns = [i for i, turn in enumerate(dialogue) if turn["role"] == "assistant"]
        if excess > 0 and len(agent_turns) > 1:  # the dialogue then opens with the human's reply to the dropped turn
            dialogue, dropped = dialogue[agent_turns[0] + 1:], dropped + 1
        elif excess > 0 and use_reference and reference_kept > 0:
            reference_kept = max(0, reference_kept - excess - 4)  # slack: cut text re-tokenizes a little differently
            task = dict(task, ground_truth=tokenizer.decode(reference[:reference_kept]) + "\n[... cut]")
        else:
            cuts = [f"dropped the oldest {dropped} agent turn(s)"] * (dropped > 0)
            cuts += [f"cut the reference solution to {reference_kept} tokens"] * (reference_kept < len(reference))
            cuts += [f"still {len(ids)} tokens, kept whole"] * (excess > 0)
            return ids, spans, dropped, ", ".join(cuts)


def sequence_logps(model, sequences):
    """Token log-probs of each id list, one padded forward pass: a [len - 1] tensor per sequence
    (entry i - 1 is token i's). Masks come from the lengths; the padding id does not matter."""
    longest, device = max(len(ids) for ids in sequences), next(model.parameters()).device
    input_ids = torch.tensor([ids + [0] * (longest - len(ids)) for ids in sequences], device=device)
    attention_mask = torch.tensor([[1] * len(ids) + [0] * (longest - len(ids)) for ids in sequences], device=device)
    logps = token_logps(model, input_ids, attention_mask)
    return [row[: len(ids) - 1] for row, ids in zip(logps, sequences)]


# --- the SWEET-RL part: the advantage (Eq. 3) and the Bradley-Terry loss (Eq. 2) ----------------

def turn_advantages(critic_logps, reference_logps, spans, normalize=True):
    """Eq. 3: A_t = (1/L_t) Σ_l [log π_θ(a_t^l | o_t, a_t^<l, c) − log π_ref(a_t^l | o_t, a_t^<l, c)].
    critic_logps, reference_logps: [seq - 1], entry i - 1 is token i's log-prob; spans: agent turn
    t's tokens are [start, end). normalize=False sums over the tokens (w/o normalization)."""
    log_ratio = critic_logps - reference_logps                        # [seq - 1]
    per_turn = [log_ratio[start - 1:end - 1] for start, end in spans]  # L_t entries each
    return torch.stack([turn.mean() if normalize else turn.sum() for turn in per_turn])  # [turns]


def bradley_terry_loss(chosen_scores, rejected_scores, beta):
    """Eq. 2: L = −log σ(β Σ_t A_t⁺ − β Σ_t A_t⁻). chosen_scores, rejected_scores: [pairs], each a
    trajectory's Σ_t A_t. Returns the mean loss over the pairs (a scalar)."""
    return -F.logsigmoid(beta * (chosen_scores - rejected_scores)).mean()


def key(trajectory):
    return trajectory["task_id"], trajectory["sample_idx"]


def pair_accuracy(margins):
    """Fraction of pairs whose chosen trajectory scores higher; a tie (as when θ = ref) counts half."""
    return ((margins > 0).float() + 0.5 * (margins == 0).float()).mean().item()


def preference_pairs(trajectories, min_reward_gap):
    """[(chosen, rejected)]: trajectories of the same task whose rewards differ by at least
    `min_reward_gap` (and differ at all), chosen = higher reward. Ordered by task, then sample_idx."""
    by_task = {}
    for trajectory in trajectories:
        by_task.setdefault(trajectory["task_id"], []).append(trajectory)
    pairs = []
    for group in by_task.values():
        group = sorted(group, key=lambda t: t["sample_idx"])
        for i, first in enumerate(group):
            for second in group[i + 1:]:
                gap = float(first["reward"]) - float(second["reward"])
                if gap != 0 and abs(gap) >= min_reward_gap:
                    pairs.append((first, second) if gap > 0 else (second, first))
    return pairs


# ---------------------------------------------------------------- scoring candidate replies (used by policy.py)

@dataclasses.dataclass
class Critic:
    model: torch.nn.Module            # the trained critic π_θ, frozen
    reference_model: torch.nn.Module  # π_ref: the initial weights it was trained from
    tokenizer: object
    use_reference: bool = True
    normalize: bool = True
    dtype: torch.dtype = torch.float32  # of the forward passes (fp32 weights, autocast to bf16 as in training)


def load_critic(critic_dir, device=None, dtype=torch.float32):
    """A trained critic folder -> Critic scoring in `dtype`; π_ref is rebuilt from the model named
    in its args.json. Weights stay fp32: the trained critic differs from π_ref by updates too small
    for bf16 weights to hold."""
    with open(os.path.join(critic_dir, "args.json")) as f:
        saved = json.load(f)
    model, tokenizer = load_model(critic_dir, device=device)
    base = saved["model_path"] if os.path.isdir(saved["model_path"]) else saved["model"]  # 'embedded' moves machines
    reference_model, _ = load_model(base, device=device)
    for frozen in (model, reference_model):
        frozen.eval()
    return Critic(model, reference_model, tokenizer, not saved["no_reference"], not saved["no_normalize"], dtype)


@torch.no_grad()
def score_candidates(critic, task, history, candidates):
    """A(o_t, a, c) of each candidate reply a to the dialogue `history` (ending with a user turn).
    The shared prefix is encoded once by the critic and once by π_ref; its KV cache serves all
    candidates in one batch. Equals scoring each full sequence on its own, up to float rounding."""
    if not candidates:
        return []
    encoded = [tokenize_turns(critic.tokenizer, critic_messages(
        task, history + [{"role": "assistant", "content": reply}], critic.use_reference)) for reply in candidates]
    sequences = [ids for ids, _ in encoded]
    reply_start = min(spans[-1][0] for _, spans in encoded)
    with autocast(critic.model.device, critic.dtype):
        critic_logps, shared = shared_prefix_logps(critic.model, sequences, reply_start)
        reference_logps, _ = shared_prefix_logps(critic.reference_model, sequences, reply_start)
    offset = shared - 1  # column j of the log-probs is token shared + j: as if the sequence began at `offset`
    return [turn_advantages(critic_logps[i], reference_logps[i], [(start - offset, end - offset)], critic.normalize).item()
            for i, (_, spans) in enumerate(encoded) for start, end in spans[-1:]]


# ---------------------------------------------------------------- training

def main(args):
    rank, world = distributed.init()  # torchrun: this process's rank and the number of processes
    out = args.out or default_output(args.scored, ".critic")
    print("critic:", json.dumps(vars(args)), f"-> {out}", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    try:
        trajectories = load_trajectories(args.scored)
    except DataError as e:
        sys.exit(f"error: {e}")
    for t in trajectories:
        if not isinstance(t.get("reward"), (int, float)):
            sys.exit(f"error: {args.scored}: trajectory {t['task_id']}/{t['sample_idx']} has no numeric 'reward'; "
                     "score the file with evaluate.py first")
    with_turns = [t for t in trajectories if any(turn["role"] == "assistant" for turn in t["dialogue_history"])]
    pairs = preference_pairs(with_turns, args.min_reward_gap)
    if not pairs:
        sys.exit(f"error: no pairs: no two trajectories of one task have rewards that differ by at least "
                 f"{args.min_reward_gap} ({len(trajectories)} trajectories). The critic needs contrast.")

    # Held-out pairs are split by task, so no held-out task was seen in training.
    tasks = list(dict.fromkeys(chosen["task_id"] for chosen, _ in pairs))
    rng.shuffle(tasks)
    n_eval = min(len(tasks) - 1, max(1, round(args.eval_fraction * len(tasks)))) if args.eval_fraction > 0 else 0
    eval_tasks = set(tasks[:n_eval])
    train_pairs = [p for p in pairs if p[0]["task_id"] not in eval_tasks]
    eval_pairs = [p for p in pairs if p[0]["task_id"] in eval_tasks]
    used = list({key(t): t for pair in pairs for t in pair}.values())
    eval_trajectories = [t for t in used if t["task_id"] in eval_tasks]
    print(f"{len(trajectories)} trajectories, {len(with_turns)} with agent turns; used: {len(tasks)} tasks, "
          f"{len(used)} trajectories, {len(pairs)} pairs -> train {len(tasks) - n_eval} tasks / {len(train_pairs)} pairs, "
          f"held out {n_eval} tasks / {len(eval_pairs)} pairs", flush=True)
    if not eval_pairs:
        print(f"note: --eval-fraction {args.eval_fraction} leaves no held-out task ({len(tasks)} paired tasks): "
              "no held-out accuracy, no advantages.jsonl lines")

    device = default_device()
    dtype, why = compute_dtype(args.dtype, device)
    describe_dtype("critic", dtype, why)
    base_model = resolve_model(args.model)
    model, tokenizer = load_model(base_model, trainable=True, device=device)
    model.float()  # fp32 master weights; the forward passes run in `dtype`
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded. Wrapped before π_ref is computed, so
    # that π_ref's forward passes are training's (FSDP: bf16 weights where `dtype` is bf16).
    trained = distributed.wrap(model, args.fsdp, dtype)
    use_reference, normalize = not args.no_reference, not args.no_normalize

    # Tokenize each trajectory once; spans locate its agent turns.
    encoded, cut = {}, 0
    for t in used:
        ids, spans, dropped, note = fit_to_length(tokenizer, t["task"], t["dialogue_history"], use_reference, args.max_length)
        encoded[key(t)] = {"ids": ids, "spans": spans, "first_turn": dropped}
        if note:
            cut += 1
            if cut <= 5:
                print(f"warning: {t['task_id']}/{t['sample_idx']} is longer than --max-length {args.max_length}: {note}")
    if cut:
        print(f"warning: {cut} of {len(used)} dialogues were cut to --max-length {args.max_length} tokens")

    # π_ref = the initial critic: its log-probs, one forward pass per trajectory, computed once.
    model.eval()
    with torch.no_grad(), autocast(device, dtype):
        mine = distributed.shard(sorted(encoded), rank, world)  # torchrun: a share each, padded: FSDP needs all ranks in each forward
        reference_logps = {name: logps.to(device) for name, logps, weight in distributed.gather(  # gathered on the CPU
            (name, sequence_logps(model, [encoded[name]["ids"]])[0], weight)
            for name, weight in tqdm(mine, desc="π_ref log-probs", unit="traj")) if weight}

    def evaluate():
        """Held-out pair accuracy (ties count half), mean margin, loss; per-turn advantages per trajectory."""
        if not eval_pairs:
            return {}, {}
        model.eval()
        with torch.no_grad(), autocast(device, dtype):
            advantages = {name: advantage for name, advantage, weight in distributed.gather(  # torchrun: a padded share each
                (key(t), turn_advantages(sequence_logps(model, [encoded[key(t)]["ids"]])[0], reference_logps[key(t)],
                                         encoded[key(t)]["spans"], normalize), weight)
                for t, weight in distributed.shard(eval_trajectories, rank, world)) if weight}
        chosen = torch.stack([advantages[key(c)].sum() for c, _ in eval_pairs])
        rejected = torch.stack([advantages[key(r)].sum() for _, r in eval_pairs])
        margin = chosen - rejected
        return {"pair_accuracy": pair_accuracy(margin),
                "mean_margin": margin.mean().item(), "loss": bradley_terry_loss(chosen, rejected, args.beta).item()}, advantages

    before, _ = evaluate()
    if before:
        print(f"held-out before training: pair accuracy {before['pair_accuracy']:.3f} (every advantage is 0 when θ = ref)")

    os.makedirs(out, exist_ok=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)  # after wrap: FSDP's parameters are shards
    steps_per_epoch = (len(train_pairs) + args.batch_size - 1) // args.batch_size
    step = 0
    with open(os.path.join(out, "log.jsonl") if rank == 0 else os.devnull, "w") as log:
        for epoch in range(args.epochs):
            order = train_pairs[:]
            rng.shuffle(order)
            for first in range(0, len(order), args.batch_size):
                batch, started = order[first:first + args.batch_size], time.time()
                model.train()
                optimizer.zero_grad()
                shares, scored = distributed.shard(batch, rank, world), []  # torchrun: this rank's pairs
                for i, ((chosen, rejected), weight) in enumerate(shares):  # gradients accumulate over the pairs
                    with distributed.sync_on_last(trained, i, len(shares)):
                        scores = []
                        for t in (chosen, rejected):  # one unpadded forward pass per trajectory, shaped as π_ref's was
                            with autocast(device, dtype):
                                critic_logps = sequence_logps(trained, [encoded[key(t)]["ids"]])[0]
                            scores.append(turn_advantages(critic_logps, reference_logps[key(t)], encoded[key(t)]["spans"], normalize).sum())
                        # The mean over the global batch; the average over ranks (DDP, FSDP) divides by `world` again.
                        (bradley_terry_loss(scores[0][None], scores[1][None], args.beta) * weight * world / len(batch)).backward()
                    if weight:
                        scored.append((scores[0].item(), scores[1].item(),
                                       len(encoded[key(chosen)]["ids"]) + len(encoded[key(rejected)]["ids"])))
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                step += 1
                scored = distributed.gather(scored)  # torchrun: the whole global batch, for the log
                chosen_scores, rejected_scores = torch.tensor([c for c, _, _ in scored]), torch.tensor([r for _, r, _ in scored])
                tokens = sum(n for _, _, n in scored)
                margin = chosen_scores - rejected_scores
                record = {"step": step, "epoch": epoch + 1,
                          "loss": bradley_terry_loss(chosen_scores, rejected_scores, args.beta).item(),
                          "pair_accuracy": pair_accuracy(margin), "margin": margin.mean().item(),
                          "chosen_score": chosen_scores.mean().item(), "rejected_score": rejected_scores.mean().item(),
                          "tokens_per_s": tokens / (time.time() - started)}
                log.write(json.dumps(record) + "\n")
                log.flush()
                print(f"step {step}/{steps_per_epoch * args.epochs} epoch {epoch + 1} | loss {record['loss']:.4f} | "
                      f"pair acc {record['pair_accuracy']:.2f} | margin {record['margin']:+.4f} | chosen "
                      f"{record['chosen_score']:+.4f} rejected {record['rejected_score']:+.4f} | "
                      f"{record['tokens_per_s']:.0f} tok/s", flush=True)

    after, advantages = evaluate()
    weights = distributed.full_state_dict(model)  # torchrun --fsdp: every rank sends its shards, rank 0 gets the whole model
    if rank > 0:
        return  # torchrun: rank 0 alone writes the outputs
    model.eval()
    model.save_pretrained(out, state_dict=weights)
    tokenizer.save_pretrained(out)
    with open(os.path.join(out, "args.json"), "w") as f:
        base_path = os.path.abspath(base_model) if os.path.isdir(base_model) else base_model  # a folder, or a hub id
        json.dump(dict(vars(args), model_path=base_path), f, indent=1)
    metrics = {"tasks": len(tasks), "trajectories": len(used), "pairs": len(pairs),
               "train_tasks": len(tasks) - n_eval, "train_pairs": len(train_pairs),
               "eval_tasks": n_eval, "eval_pairs": len(eval_pairs), "steps": step,
               "before": before, "after": after}
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    with open(os.path.join(out, "advantages.jsonl"), "w") as f:
        for t in eval_trajectories:
            for turn, advantage in enumerate(advantages[key(t)].tolist(), encoded[key(t)]["first_turn"]):
                f.write(json.dumps({"task_id": t["task_id"], "sample_idx": t["sample_idx"], "turn": turn,
                                    "advantage": advantage, "reward": t["reward"]}) + "\n")
    summary = (f"held-out pair accuracy {before['pair_accuracy']:.3f} -> {after['pair_accuracy']:.3f} "
               f"({len(eval_pairs)} pairs)" if after else "no held-out pairs")
    print(f"done: {step} steps, {summary} | critic, args.json, metrics.json, advantages.jsonl, log.jsonl -> {out}")


if __name__ == "__main__":
    main(parser.parse_args())
