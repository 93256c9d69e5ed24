"""Stage 3 of SWEET-RL: a step-level critic trained with a Bradley-Terry loss, shown the task's solution c.

    python critic.py runs/backend_train.scored.jsonl                 # -> runs/backend_train.critic/

Input: scored trajectories (evaluate.py's output, or an official ColBench offline file that has a
`reward` on each line). Two trajectories of one task whose rewards differ make a pair, the
higher-reward one being chosen (--pairing official: the official scripts' stricter rule, see
`preference_pairs`). The critic is a causal LM, with its own LM head and no value head.
It reads the solution c (the task's reference solution, `ground_truth`), which the agent never
saw, then the agent's system prompt and the dialogue. Its advantage for agent turn t is a log-ratio
against its own frozen initial weights π_ref, averaged over the turn's tokens (paper Eq. 3):

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
  reference page's HTML as c. The paper's frontend critic was a vision-language model with a regression
  head.
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
from colbench.stats import bootstrap_mean_ci, spearman
from colbench.env import agent_messages
from colbench.models import (DTYPES, autocast, compute_dtype, default_device, describe_dtype, load_model, resolve_model,
                             sequence_logps, shared_prefix_logps, shares_prefix, tokenize_turns)

PAIRINGS = ("all", "official")  # the rules of preference_pairs
MIN_LENGTH = 32  # --max-length floor: fewer tokens cannot hold the prompt's chat markup, let alone a dialogue

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (each line with a `reward`), e.g. evaluate.py's output")
parser.add_argument("--out", help="critic folder to write (default runs/<stem>.critic)")
parser.add_argument("--model", default="embedded", help="initial critic and π_ref: model folder, hub id or 'embedded'")
parser.add_argument("--beta", type=positive_float, default=0.1, help="β of the Bradley-Terry loss (Eq. 2)")
parser.add_argument("--lr", type=positive_float, default=2e-5, help="AdamW learning rate")
parser.add_argument("--epochs", type=positive_int, default=2, help="passes over the training pairs")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs per optimizer step, at least: a task's pairs stay in one step, one task per forward "
                         "pass")
parser.add_argument("--eval-fraction", type=fraction_or_zero, default=0.1, help="fraction of the paired tasks held out")
parser.add_argument("--min-reward-gap", type=non_negative_float, default=0.0,
                    help="pair two trajectories of a task only when their rewards differ by at least this "
                         "(0: any difference)")
parser.add_argument("--pairing", default="all", choices=PAIRINGS,
                    help="which trajectories of a task make pairs: all (any two whose rewards differ) or official "
                         "(the official scripts' rule; see preference_pairs)")
parser.add_argument("--max-length", type=at_least(MIN_LENGTH), default=2048,
                    help="tokens per critic sequence at most; the oldest turns go first")
parser.add_argument("--no-solution", "--no-reference", action="store_true",  # --no-reference: its old name
                    help="leave out the solution c (ablation: w/o training-time information)")
parser.add_argument("--no-normalize", action="store_true",
                    help="sum over a turn's tokens instead of averaging (ablation: w/o normalization)")
parser.add_argument("--gradient-checkpointing", action="store_true",
                    help="recompute activations in the backward pass to save memory")
parser.add_argument("--fsdp", action="store_true",
                    help="under torchrun: shard the weights, gradients and AdamW states across the ranks (FSDP2) "
                         "instead of DDP replicas")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="forward passes; auto: bf16 autocast where the hardware computes bf16 natively, else fp32")
parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for the split, the pair order and the model")

SOLUTION_HEADER = "Reference solution (shown to you, never to the assistant):\n"


# ---------------------------------------------------------------- the critic's view of a dialogue

def critic_messages(task, dialogue, use_solution=True):
    """The critic's prompt: one system message holding the solution c (when `use_solution`)
    followed by the agent's system prompt, then the dialogue turns."""
    messages = agent_messages(task, dialogue)
    if use_solution:
        c = SOLUTION_HEADER + task["ground_truth"].strip() + "\n\n"
        messages[0] = {"role": "system", "content": c + messages[0]["content"]}
    return messages


def fit_to_length(tokenizer, task, dialogue, use_solution, max_length):
    """(ids, agent-turn spans, agent turns dropped, what was cut or '') of the critic's view, cut to
    `max_length` tokens: the oldest (user, agent) exchanges go first, then the tail of c."""
    solution = tokenizer(task["ground_truth"], add_special_tokens=False)["input_ids"]
    dropped, solution_kept = 0, len(solution)
    while True:
        ids, spans = tokenize_turns(tokenizer, critic_messages(task, dialogue, use_solution))
        excess = len(ids) - max_length
        agent_turns = [i for i, turn in enumerate(dialogue) if turn["role"] == "assistant"]
        if excess > 0 and len(agent_turns) > 1:  # the dialogue then opens with the human's reply to the dropped turn
            dialogue, dropped = dialogue[agent_turns[0] + 1:], dropped + 1
        elif excess > 0 and use_solution and solution_kept > 0:
            solution_kept = max(0, solution_kept - excess - 4)  # slack: cut text re-tokenizes a little differently
            task = dict(task, ground_truth=tokenizer.decode(solution[:solution_kept]) + "\n[... cut]")
        else:
            cuts = []
            if dropped > 0:
                cuts.append(f"dropped the oldest {dropped} agent turn(s)")
            if solution_kept < len(solution):
                cuts.append(f"cut the reference solution to {solution_kept} tokens")
            if excess > 0:
                cuts.append(f"still {len(ids)} tokens, kept whole")
            return ids, spans, dropped, ", ".join(cuts)


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


def pair_outcomes(margins):
    """1 for a pair whose chosen trajectory scores higher, 0 for one where it scores lower; a tie (as
    when θ = ref) counts half."""
    return (margins > 0).float() + 0.5 * (margins == 0).float()


def pair_accuracy(margins):
    return pair_outcomes(margins).mean().item()


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


# ---------------------------------------------------------------- scoring candidate replies (used by policy.py)

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
    # Folders written before --no-reference was renamed --no-solution say `no_reference`.
    no_solution = saved["no_solution"] if "no_solution" in saved else saved["no_reference"]
    return Critic(model, reference_model, tokenizer, not no_solution, not saved["no_normalize"], dtype)


@torch.no_grad()
def score_candidates(critic, task, history, candidates):
    """A(o_t, a, c) of each candidate reply a to the dialogue `history` (ending with a user turn).
    The shared prefix is encoded once by the critic and once by π_ref; its KV cache serves all
    candidates in one batch. Equals scoring each full sequence on its own, up to float rounding."""
    if not candidates:
        return []
    encoded = [tokenize_turns(critic.tokenizer, critic_messages(
        task, history + [{"role": "assistant", "content": reply}], critic.use_solution)) for reply in candidates]
    sequences = [ids for ids, _ in encoded]
    reply_start = min(spans[-1][0] for _, spans in encoded)
    with autocast(critic.model.device, critic.dtype):
        critic_logps, _ = shared_prefix_logps(critic.model, sequences, reply_start)
        reference_logps, _ = shared_prefix_logps(critic.reference_model, sequences, reply_start)
    advantages = []
    for critic_row, reference_row, (_, spans) in zip(critic_logps, reference_logps, encoded):
        last_turn = spans[-1:]  # the candidate reply
        advantages.append(turn_advantages(critic_row, reference_row, last_turn, critic.normalize).item())
    return advantages


def ranking_quality(scores, tests_passed):
    """How well the critic ranks candidate replies, against the tests. Both arguments: one list per
    turn state, a value per candidate (its critic score; its fraction of tests passed).

    critic_pick: tests passed by each state's top-scored candidate, averaged over states (best-of-N
    by the critic); random_pick: the mean over all candidates (what a random pick gets on average);
    rank_correlation: Spearman's correlation of score and tests passed within a state, averaged over
    the states where the tests tell the candidates apart."""
    picks = [tests[max(range(len(tests)), key=lambda i: state_scores[i])]
             for state_scores, tests in zip(scores, tests_passed)]
    correlations = [spearman(state_scores, tests) for state_scores, tests in zip(scores, tests_passed)]
    correlations = [c for c in correlations if c is not None]
    return {"critic_pick": sum(picks) / len(picks),
            "random_pick": sum(sum(tests) / len(tests) for tests in tests_passed) / len(tests_passed),
            "rank_correlation": sum(correlations) / len(correlations) if correlations else None,
            "states": len(picks), "states_with_different_tests": len(correlations)}


# ---------------------------------------------------------------- the steps of training, in the order main takes them

def split_by_task(pairs, eval_fraction, rng):
    """(train pairs, held-out pairs): the pairs of a random `eval_fraction` of the paired tasks are held
    out, so that no held-out task is seen in training. A fraction above 0 holds out one task at least,
    and leaves one at least to train on."""
    tasks = list(dict.fromkeys(chosen["task_id"] for chosen, _ in pairs))
    rng.shuffle(tasks)
    n_eval = 0
    if eval_fraction > 0:
        n_eval = max(1, round(eval_fraction * len(tasks)))
        n_eval = min(n_eval, len(tasks) - 1)
    eval_tasks = set(tasks[:n_eval])
    train_pairs = [pair for pair in pairs if pair[0]["task_id"] not in eval_tasks]
    eval_pairs = [pair for pair in pairs if pair[0]["task_id"] in eval_tasks]
    return train_pairs, eval_pairs


def encode(tokenizer, trajectories, use_solution, max_length):
    """{trajectory key: view}: each trajectory tokenized once as the critic sees it (fit_to_length). A
    view holds the token ids, the spans of the agent turns and the number of the first turn kept."""
    views, cut = {}, 0
    for t in trajectories:
        ids, spans, dropped, note = fit_to_length(tokenizer, t["task"], t["dialogue_history"], use_solution, max_length)
        views[key(t)] = {"ids": ids, "spans": spans, "first_turn": dropped}
        if note:
            cut += 1
            if cut <= 5:
                print(f"warning: {t['task_id']}/{t['sample_idx']} is longer than --max-length {max_length}: {note}")
    if cut:
        print(f"warning: {cut} of {len(trajectories)} dialogues were cut to --max-length {max_length} tokens")
    return views


def keys_by_task(keys):
    """{task_id: [trajectory keys]}, in the order given."""
    grouped = {}
    for trajectory_key in keys:
        task_id, _ = trajectory_key
        grouped.setdefault(task_id, []).append(trajectory_key)
    return grouped


def task_logps(model, views, keys, share_prefix=True):
    """{key: [len - 1] token log-probs} of one task's trajectories. They begin alike (system prompt, c,
    the problem): with `share_prefix` that beginning is encoded once (shared_prefix_logps), else each
    trajectory gets a forward pass of its own."""
    sequences = [views[k]["ids"] for k in keys]
    if share_prefix:
        first_scored = min(views[k]["spans"][0][0] for k in keys)  # the first agent token of any of them
        logps, _ = shared_prefix_logps(model, sequences, first_scored)
    else:
        logps = [sequence_logps(model, [ids])[0] for ids in sequences]
    return dict(zip(keys, logps))


@torch.no_grad()
def frozen_logps(model, views, task_ids, args, dtype, rank, world, desc):
    """task_logps of every trajectory of these tasks, without gradients. torchrun: each rank takes a
    share of the tasks, padded so that every rank runs as many forward passes (FSDP needs all ranks in
    each), and every rank gets every result."""
    model.eval()
    by_task, mine = keys_by_task(views), []
    for task_id, weight in tqdm(distributed.shard(sorted(task_ids), rank, world), desc=desc, unit="task"):
        with autocast(model.device, dtype):
            logps = task_logps(model, views, by_task[task_id], shares_prefix(args))
        if weight:  # torchrun: weight 0 marks a padding pass
            mine += logps.items()
    return {k: logps.to(model.device) for k, logps in distributed.gather(mine)}  # gather returns them on the CPU


def reference_logprobs(model, views, args, dtype, rank, world):
    """π_ref = the initial critic, before any update: each trajectory's token log-probs, computed once
    and kept in its view, so that only one model is held in memory."""
    all_tasks = {task_id for task_id, _ in views}
    logps = frozen_logps(model, views, all_tasks, args, dtype, rank, world, desc="π_ref log-probs")
    for k, view in views.items():
        view["reference_logps"] = logps[k]


def trajectory_scores(logps, views, keys, normalize):
    """Σ_t A_t of each trajectory: its turn advantages (Eq. 3) summed, its score in Eq. 2. [len(keys)]"""
    return torch.stack([turn_advantages(logps[k], views[k]["reference_logps"], views[k]["spans"], normalize).sum()
                        for k in keys])


def evaluate(model, views, eval_pairs, args, dtype, rank, world):
    """Held-out pair accuracy (ties count half) with its 95% interval (tasks resampled), mean margin,
    loss, each pair's margin, task and sample indices (chosen, rejected); and {trajectory key: its turn
    advantages} of the held-out trajectories."""
    normalize = not args.no_normalize
    eval_tasks = {chosen["task_id"] for chosen, _ in eval_pairs}
    logps = frozen_logps(model, views, eval_tasks, args, dtype, rank, world, desc="held-out log-probs")
    advantages = {k: turn_advantages(logps[k], views[k]["reference_logps"], views[k]["spans"], normalize)
                  for k in logps}
    chosen = trajectory_scores(logps, views, [key(c) for c, _ in eval_pairs], normalize)
    rejected = trajectory_scores(logps, views, [key(r) for _, r in eval_pairs], normalize)
    margins = chosen - rejected
    outcomes = {}  # task_id -> the outcome of each of its pairs, for the task bootstrap
    for pair, outcome in zip(eval_pairs, pair_outcomes(margins).tolist()):
        outcomes.setdefault(pair[0]["task_id"], []).append(outcome)
    metrics = {"pair_accuracy": pair_accuracy(margins), "pair_accuracy_ci95": list(bootstrap_mean_ci(outcomes)),
               "mean_margin": margins.mean().item(), "margins": margins.tolist(),
               "pair_task_ids": [pair[0]["task_id"] for pair in eval_pairs],
               "pair_samples": [[chosen["sample_idx"], rejected["sample_idx"]] for chosen, rejected in eval_pairs],
               "loss": -F.logsigmoid(args.beta * margins).mean().item()}
    return metrics, advantages


def train_step(model, optimizer, views, batch, args, dtype, rank, world):
    """One optimizer step on a batch of whole tasks ({task_id: its training pairs}), the loss a mean over
    the batch's pairs. `model` is as distributed.wrap returned it. Returns (chosen score, rejected score,
    tokens per pair) of every pair of the batch, for the log."""
    batch_pairs = sum(len(pairs) for pairs in batch.values())
    by_task = keys_by_task(views)
    model.train()
    optimizer.zero_grad()
    shares, scored = distributed.shard(list(batch), rank, world), []  # torchrun: this rank's tasks
    for i, (task_id, weight) in enumerate(shares):  # gradients accumulate over the tasks
        pairs = batch[task_id]
        with distributed.sync_on_last(model, i, len(shares)):  # torchrun: DDP communicates on the last one only
            with autocast(next(model.parameters()).device, dtype):
                logps = task_logps(model, views, by_task[task_id], shares_prefix(args))
            # --- SWEET-RL: the Bradley-Terry loss (Eq. 2) on this task's pairs, scores from Eq. 3
            chosen = trajectory_scores(logps, views, [key(c) for c, _ in pairs], not args.no_normalize)
            rejected = trajectory_scores(logps, views, [key(r) for _, r in pairs], not args.no_normalize)
            loss = bradley_terry_loss(chosen, rejected, args.beta) * len(pairs) / batch_pairs
            # torchrun: `weight * world` keeps the mean over the global batch (DDP and FSDP average over ranks)
            (loss * weight * world).backward()
        if weight:
            tokens = sum(len(views[k]["ids"]) for k in by_task[task_id])
            scored += [(c, r, tokens / len(pairs)) for c, r in zip(chosen.tolist(), rejected.tolist())]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return distributed.gather(scored)  # torchrun: the whole global batch


def step_statistics(scored, beta, seconds):
    """The log line's numbers of a step, from train_step's (chosen score, rejected score, tokens per pair)."""
    chosen, rejected = torch.tensor([c for c, _, _ in scored]), torch.tensor([r for _, r, _ in scored])
    margins = chosen - rejected
    return {"loss": bradley_terry_loss(chosen, rejected, beta).item(), "pair_accuracy": pair_accuracy(margins),
            "margin": margins.mean().item(), "chosen_score": chosen.mean().item(),
            "rejected_score": rejected.mean().item(), "tokens_per_s": sum(n for _, _, n in scored) / seconds}


def task_batches(task_ids, pairs_of, batch_size):
    """Consecutive tasks grouped into batches of at least `batch_size` pairs (a task's pairs stay together)."""
    batches, batch, count = [], [], 0
    for task_id in task_ids:
        batch.append(task_id)
        count += len(pairs_of[task_id])
        if count >= batch_size:
            batches.append(batch)
            batch, count = [], 0
    if batch:
        batches.append(batch)
    return batches


def train(model, views, train_pairs, args, rng, log_path, dtype, rank, world):
    """AdamW over batches of whole tasks, in a new random order each epoch; one log line per optimizer
    step. `model` is as distributed.wrap returned it. Returns the number of steps."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)  # after wrap: FSDP's are shards
    pairs_of = {}  # task_id -> its training pairs
    for pair in train_pairs:
        pairs_of.setdefault(pair[0]["task_id"], []).append(pair)
    step = 0
    with open(log_path if rank == 0 else os.devnull, "w") as log:  # torchrun: rank 0 alone writes
        for epoch in range(args.epochs):
            order = list(pairs_of)
            rng.shuffle(order)
            batches = task_batches(order, pairs_of, args.batch_size)  # their number varies with the order
            for batch_number, batch in enumerate(batches, 1):
                started = time.time()
                scored = train_step(model, optimizer, views, {task_id: pairs_of[task_id] for task_id in batch},
                                    args, dtype, rank, world)
                step += 1
                record = {"step": step, "epoch": epoch + 1, **step_statistics(scored, args.beta, time.time() - started)}
                log.write(json.dumps(record) + "\n")
                log.flush()
                print(f"step {step} (epoch {epoch + 1}/{args.epochs}, batch {batch_number}/{len(batches)}) | "
                      f"loss {record['loss']:.4f} | pair acc {record['pair_accuracy']:.2f} | "
                      f"margin {record['margin']:+.4f} | chosen {record['chosen_score']:+.4f} "
                      f"rejected {record['rejected_score']:+.4f} | {record['tokens_per_s']:.0f} tok/s", flush=True)
    return step


def advantage_rows(trajectories, advantages, views):
    """The lines of advantages.jsonl: one per agent turn of each held-out trajectory, its advantage and reward."""
    rows = []
    for t in trajectories:
        first_turn = views[key(t)]["first_turn"]  # turns dropped by --max-length are not scored
        for turn, advantage in enumerate(advantages[key(t)].tolist(), first_turn):
            rows.append({"task_id": t["task_id"], "sample_idx": t["sample_idx"], "turn": turn,
                         "advantage": advantage, "reward": t["reward"]})
    return rows


def pairs_split_by_task(trajectories, args, rng):
    """The preference pairs of the trajectories that have agent turns, split by task: (train pairs,
    held-out pairs, the paired trajectories each once, their counts for metrics.json). Prints the
    counts; no pairs at all is bad input."""
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


def save(out, model, weights, tokenizer, args, base_model, metrics, advantages):
    """The critic's folder: the model (loadable by load_critic), args.json with the base model's
    path (π_ref), metrics.json, and the held-out turns' advantages."""
    model.eval()
    model.save_pretrained(out, state_dict=weights)
    tokenizer.save_pretrained(out)
    with open(os.path.join(out, "args.json"), "w") as f:
        base_path = os.path.abspath(base_model) if os.path.isdir(base_model) else base_model  # a folder, or a hub id
        json.dump(dict(vars(args), model_path=base_path), f, indent=1)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    write_jsonl(os.path.join(out, "advantages.jsonl"), advantages)


def main(args):
    rank, world = distributed.init()  # torchrun: this process's rank and the number of processes
    out = args.out or default_output(args.scored, ".critic")
    print("critic:", json.dumps(vars(args)), f"-> {out}", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    trajectories = trajectories_or_fail(args.scored, rewards_for="the critic")

    train_pairs, eval_pairs, used, counts = pairs_split_by_task(trajectories, args, rng)

    # The critic: fp32 master weights, forward passes in `dtype`.
    device = default_device()
    dtype, why = compute_dtype(args.dtype, device)
    describe_dtype("critic", dtype, why)
    base_model = resolve_model(args.model)
    model, tokenizer = load_model(base_model, trainable=True, device=device)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded. Wrapped before π_ref is computed, so
    # that π_ref's forward passes are training's (FSDP: bf16 weights where `dtype` is bf16).
    trained = distributed.wrap(model, args.fsdp, dtype)

    views = encode(tokenizer, used, not args.no_solution, args.max_length)
    # --- SWEET-RL: π_ref, the frozen initial critic of Eq. 3, as cached log-probs
    reference_logprobs(model, views, args, dtype, rank, world)
    # Before training θ = π_ref: every advantage is 0 and every held-out pair a tie.
    before = {"pair_accuracy": 0.5, "mean_margin": 0.0, "loss": math.log(2)} if eval_pairs else {}

    os.makedirs(out, exist_ok=True)
    steps = train(trained, views, train_pairs, args, rng, os.path.join(out, "log.jsonl"), dtype, rank, world)

    after, advantages = {}, {}
    if eval_pairs:
        after, advantages = evaluate(model, views, eval_pairs, args, dtype, rank, world)
    weights = distributed.full_state_dict(model)  # torchrun --fsdp: every rank sends its shards to rank 0
    if rank > 0:
        return  # torchrun: rank 0 alone writes the outputs
    metrics = dict(counts, steps=steps, before=before, after=after)
    held_out = [t for t in used if t["task_id"] in counts["eval_task_ids"]]
    save(out, model, weights, tokenizer, args, base_model, metrics, advantage_rows(held_out, advantages, views))
    summary = "no held-out pairs"
    if after:
        summary = (f"held-out pair accuracy {before['pair_accuracy']:.3f} -> {after['pair_accuracy']:.3f} "
                   f"({len(eval_pairs)} pairs)")
    print(f"done: {steps} steps, {summary} | critic, args.json, metrics.json, advantages.jsonl, log.jsonl -> {out}")


if __name__ == "__main__":
    main(parser.parse_args())
