"""Stage 3 of SWEET-RL: a step-level critic that reads the solution c, trained by Bradley-Terry.

    python critic.py runs/backend_train.scored.jsonl          # -> runs/backend_train.critic/

Reads scored trajectories (evaluate.py's output, or an official ColBench offline file with rewards).
The critic is a causal LM that reads c (the task's solution, never shown to the agent), then what the
agent saw: its prompt, which states the turn budget, and the dialogue. Its advantage for an agent turn
is the mean log-ratio of the turn's tokens against its own frozen initial weights π_ref (Eq. 3). Two
trajectories of one task whose rewards differ make a pair, and training ranks them by their scores
(Eq. 2: the sum of their A_t, or by default the official one mean over their agent tokens). Read top
to bottom: what the critic reads, its log-probs, Eq. 3, Eq. 2 and its
pairs, the loop, the held-out evaluation, the trained critic scoring replies (policy.py ranks with it),
the stage. Writes the critic folder once whole: the checkpoint, args.json, log.jsonl (a line per
step), metrics.json (held-out pair accuracy before and after training) and advantages.jsonl (each
held-out turn's advantage). Departures from the paper: docs/DEPARTURES.md.
"""
import argparse
import dataclasses
import json
import os
import random
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from colbench import distributed
from colbench.cli import (at_least, fail, fraction_or_zero, non_negative_float, non_negative_int,
                          positive_float, positive_int, trajectories_or_fail)
from colbench.data import (default_output, finish_folder, partial_folder, succeeded, task_kind,
                           write_jsonl)
from colbench.env import LAST_TURN_NOTE, agent_messages, turn_budget
from colbench.frontend import page_summary
from colbench.fast_logps import shared_prefix_logps
from colbench.models import (DTYPES, SCHEDULES, adamw, autocast, compute_dtype, describe_dtype,
                             load_model, padded_batch, resolve_model, tokenize_turns)
from colbench.stats import bootstrap_mean_ci, pair_outcomes

MIN_LENGTH = 32  # --max-length floor: fewer tokens cannot hold the prompt's chat markup
PAIRINGS = ("all", "official")  # the rules of preference_pairs
SCORES = ("token-mean", "turn-sum")  # a trajectory's score in Eq. 2 (trajectory_scores)

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (each line with a `reward`)")
parser.add_argument("--out", help="critic folder to write (default runs/<stem>.critic)")
parser.add_argument("--model", default="embedded",
                    help="initial critic and π_ref: model folder, hub id or 'embedded' "
                         "(paper: Llama-3.1-8B-Instruct)")
parser.add_argument("--beta", type=positive_float, default=0.1, help="β of Eq. 2 (paper: 0.1)")
parser.add_argument("--lr", type=positive_float, default=1e-4,
                    help="AdamW learning rate (paper: 2e-7)")
parser.add_argument("--epochs", type=positive_int, default=1,
                    help="passes over the training pairs (paper: 4)")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs per optimizer step, at least: a task's pairs stay in one step, "
                         "sharing its trajectories' log-probs (paper: 8)")
parser.add_argument("--eval-fraction", type=fraction_or_zero, default=0.5,
                    help="fraction of the paired tasks held out (official: a few percent)")
parser.add_argument("--min-reward-gap", type=non_negative_float, default=0.0,
                    help="pair two trajectories of a task only when their rewards differ by this")
parser.add_argument("--pairing", default="all", choices=PAIRINGS,
                    help="all: any two trajectories of a task whose rewards differ; official: the "
                         "official scripts' rule (preference_pairs)")
parser.add_argument("--max-length", type=at_least(MIN_LENGTH), default=1024,
                    help="tokens per critic sequence at most; the oldest turns go first")
parser.add_argument("--no-solution", action="store_true",
                    help="leave out the solution c (paper's ablation: w/o training-time information)")
parser.add_argument("--page-facts", action="store_true",
                    help="frontend: c is the reference page's facts as the human tells them, not its HTML "
                         "(paper: the HTML)")
parser.add_argument("--no-normalize", action="store_true",
                    help="A_t sums over a turn's tokens instead of averaging (paper's ablation: w/o "
                         "normalization); a trajectory's score is then the sum over all its agent tokens")
parser.add_argument("--trajectory-score", default="token-mean", choices=SCORES,
                    help="a trajectory's score in Eq. 2: token-mean, the official code's mean over all "
                         "agent tokens, or turn-sum, the paper's Σ_t A_t")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, decay to 0.1x)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="forward passes; auto: bf16 where the hardware computes it natively")
parser.add_argument("--seed", type=non_negative_int, default=0,
                    help="seed for the split, the pair order and the model")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--plain", action="store_true",
                   help="log-probs the plain way only: each sequence encoded whole (slower, same numbers)")
scale.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass to save memory")
scale.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW states (FSDP2)")


# ---------------------------------------------------------------- what the critic reads

SOLUTION_HEADER = "Reference solution (shown to you, never to the assistant):\n"


def solution(task, page_facts=False):
    """c: the task's reference solution. With `page_facts`, a frontend task's reference page as what the
    human knows of it (its colors, font, layout, menu, sections and title, in the words the human tells
    them: colbench/frontend.py `page_summary`), in about a seventh of the HTML's tokens."""
    if page_facts and task_kind(task) == "frontend":
        return page_summary(task["ground_truth"])
    return task["ground_truth"].strip()


def critic_messages(task, dialogue, max_turns, use_solution=True, page_facts=False):
    """What the agent saw (its system prompt, the budget of `max_turns` turns included, then the
    dialogue), with the solution c put before the system prompt when `use_solution`."""
    messages = agent_messages(task, dialogue, max_turns)
    if use_solution:
        c = SOLUTION_HEADER + solution(task, page_facts) + "\n\n"
        messages[0] = {"role": "system", "content": c + messages[0]["content"]}
    return messages


def fit_to_length(tokenizer, task, dialogue, max_turns, use_solution, max_length, page_facts=False):
    """(ids, agent-turn spans, agent turns dropped, what was cut or '') of the critic's view, cut to
    `max_length` tokens: the oldest exchanges (an agent turn and the human's reply) go first. The
    problem and c always stay; a dialogue too long with one agent turn left is kept whole."""
    dropped = 0
    while True:
        messages = critic_messages(task, dialogue, max_turns, use_solution, page_facts)
        ids, spans = tokenize_turns(tokenizer, messages)  # spans: [start, end) of each agent turn
        agent_turns = [i for i, turn in enumerate(dialogue) if turn["role"] == "assistant"]
        if len(ids) <= max_length or len(agent_turns) < 2:
            cuts = [f"dropped the oldest {dropped} agent turn(s)"] if dropped else []
            if len(ids) > max_length:
                cuts.append(f"still {len(ids)} tokens, kept whole")
            return ids, spans, dropped, ", ".join(cuts)
        dialogue, dropped = drop_oldest_exchange(dialogue, agent_turns[0]), dropped + 1


def drop_oldest_exchange(dialogue, first):
    """`dialogue` without its agent turn at index `first` and the human's reply to it. A last-turn note in
    that reply moves to the message before, which now precedes the agent's last turn."""
    reply = first + 1 < len(dialogue) and dialogue[first + 1]["role"] == "user"
    kept = dialogue[:first] + dialogue[first + 1 + reply:]
    if reply and dialogue[first + 1]["content"].endswith(LAST_TURN_NOTE) and first > 0:
        kept[first - 1] = dict(kept[first - 1], content=kept[first - 1]["content"] + LAST_TURN_NOTE)
    return kept


def trajectory_id(trajectory):
    return trajectory["task_id"], trajectory["sample_idx"]


def critic_views(tokenizer, trajectories, use_solution, max_length, page_facts=False):
    """{trajectory id: view}, each trajectory tokenized once as the critic sees it: the token ids,
    the [start, end) spans of its agent turns, and the number of the first agent turn kept."""
    views, cut = {}, 0
    for t in trajectories:
        ids, spans, dropped, note = fit_to_length(tokenizer, t["task"], t["dialogue_history"],
                                                  turn_budget(t), use_solution, max_length, page_facts)
        views[trajectory_id(t)] = {"ids": ids, "spans": spans, "first_turn": dropped}
        if note and (cut := cut + 1) <= 5:
            print(f"warning: {t['task_id']}/{t['sample_idx']} is over --max-length {max_length}: {note}")
    if cut:
        print(f"warning: {cut} of {len(trajectories)} dialogues were cut to {max_length} tokens")
    return views


# ---------------------------------------------------------------- log-probs, the plain way

def sequence_logps(model, sequences):
    """Token log-probs of id lists, the plain way (the definition): pad, one forward pass,
    log-softmax in fp32, the targets' entries. A [len - 1] tensor per sequence, entry i - 1 being
    log p(token i | the tokens before it)."""
    input_ids, attention_mask = padded_batch(sequences, next(model.parameters()).device)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # [n, longest, vocab]
    logps = logits[:, :-1].float().log_softmax(-1)  # [n, longest - 1, vocab]
    targets = logps.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # [n, longest - 1]
    return [row[: len(ids) - 1] for row, ids in zip(targets, sequences)]


def logps_of(model, sequences, scored_from, fast=True, memory=None):
    """sequence_logps of sequences that begin alike. fast: the same numbers (a test holds them
    equal), their common beginning before `scored_from` encoded once (colbench/fast_logps.py)."""
    if fast:
        return shared_prefix_logps(model, sequences, scored_from, memory)[0]
    return sequence_logps(model, sequences)


def task_logps(model, views, ids, fast=True):
    """{trajectory id: token log-probs} of one task's trajectories, which begin alike (c, the prompt)."""
    first_scored = min(views[i]["spans"][0][0] for i in ids)  # the first agent token of any
    return dict(zip(ids, logps_of(model, [views[i]["ids"] for i in ids], first_scored, fast)))


# --- the SWEET-RL part: the advantage of each agent turn (Eq. 3), a trajectory's score, Eq. 2

def turn_advantages(critic_logps, reference_logps, spans, normalize=True):
    """Eq. 3: A_t = (1/L_t) Σ_l [log π_θ(a_t^l | o_t, a_t^<l, c) − log π_ref(a_t^l | o_t, a_t^<l, c)].
    critic_logps, reference_logps: [seq - 1], entry i - 1 is token i's log-prob; spans: agent turn
    t's tokens are [start, end). normalize=False sums over the tokens (w/o normalization)."""
    log_ratio = critic_logps - reference_logps                        # [seq - 1]
    per_turn = [log_ratio[start - 1:end - 1] for start, end in spans]  # L_t entries each
    return torch.stack([turn.mean() if normalize else turn.sum() for turn in per_turn])  # [turns]


def trajectory_scores(logps, reference, views, ids, normalize=True, score="token-mean"):
    """Each trajectory's score in Eq. 2: [len(ids)]. logps, reference: {id: [seq - 1]}.
    token-mean, the official code's: one mean of the log-ratio over all the agent tokens,
    Σ_t (L_t / L) A_t. turn-sum, the paper's: Σ_t A_t. normalize=False (w/o normalization): A_t is a
    sum over the turn's tokens, and the score Σ_t A_t, the sum over all agent tokens, either way."""
    scores = []
    for i in ids:
        spans = views[i]["spans"]
        advantages = turn_advantages(logps[i], reference[i], spans, normalize)  # [turns]
        if score == "token-mean" and normalize:
            lengths = advantages.new_tensor([end - start for start, end in spans])  # L_t
            advantages = advantages * lengths / lengths.sum()
        scores.append(advantages.sum())
    return torch.stack(scores)


def bradley_terry_loss(chosen_scores, rejected_scores, beta):
    """Eq. 2: L = −log σ(β Σ_t A_t⁺ − β Σ_t A_t⁻). chosen_scores, rejected_scores: [pairs], each a
    trajectory's score. Returns the mean loss over the pairs (a scalar)."""
    return -F.logsigmoid(beta * (chosen_scores - rejected_scores)).mean()


OFFICIAL_FRONTEND_GAP = 0.1  # the official frontend scripts skip pairs whose CLIP rewards are closer


def preference_pairs(trajectories, min_reward_gap=0.0, pairing="all"):
    """Eq. 2's pairs [(chosen, rejected)]: trajectories of one task whose rewards differ (by at least
    `min_reward_gap`), chosen = higher reward; by task, then sample_idx. 'all': every two such
    trajectories of a task. 'official', the official scripts' rule: a backend task pairs only when
    one of its trajectories succeeded, its best (lowest sample_idx among equals) against each worse
    one; frontend pairs are 'all' pairs whose rewards differ by at least 0.1."""
    pairs = []
    for group in by_task(trajectories, task_id=lambda t: t["task_id"]).values():
        group, smallest_gap = sorted(group, key=lambda t: t["sample_idx"]), min_reward_gap
        if pairing == "official" and task_kind(group[0]["task"]) == "backend":
            if not any(succeeded(t) for t in group):
                continue
            best = max(group, key=lambda t: float(t["reward"]))  # max keeps the first of equals
            candidates = [(best, other) for other in group if other is not best]
        else:
            if pairing == "official":
                smallest_gap = max(min_reward_gap, OFFICIAL_FRONTEND_GAP)
            candidates = [(a, b) for i, a in enumerate(group) for b in group[i + 1:]]
        for first, second in candidates:
            gap = float(first["reward"]) - float(second["reward"])
            if gap != 0 and abs(gap) >= smallest_gap:
                pairs.append((first, second) if gap > 0 else (second, first))
    return pairs


def by_task(items, task_id=lambda item: item[0]):
    """{task_id: [items]}, in the order given: trajectory ids, pairs or trajectories."""
    grouped = {}
    for item in items:
        grouped.setdefault(task_id(item), []).append(item)
    return grouped


def split_by_task(pairs, eval_fraction, rng):
    """(train pairs, held-out pairs): the pairs of a random `eval_fraction` of the paired tasks are
    held out, so that no held-out task is seen in training; one task at least on each side."""
    tasks = list(dict.fromkeys(chosen["task_id"] for chosen, _ in pairs))
    rng.shuffle(tasks)
    n_eval = 0
    if eval_fraction > 0:
        n_eval = min(max(1, round(eval_fraction * len(tasks))), len(tasks) - 1)
    held_out = set(tasks[:n_eval])
    return ([pair for pair in pairs if pair[0]["task_id"] not in held_out],
            [pair for pair in pairs if pair[0]["task_id"] in held_out])


# ---------------------------------------------------------------- the loop

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


@torch.no_grad()
def frozen_logps(model, views, ids_of, dtype, fast, desc):
    """{trajectory id: its token log-probs} of each task's trajectories ({task_id: ids}), no gradients."""
    model.eval()
    mine = []
    for task_id, padding in tqdm(list(distributed.share(sorted(ids_of))), desc=desc, unit="task"):
        with autocast(model.device, dtype):
            logps = task_logps(model, views, ids_of[task_id], fast)
        if not padding:  # torchrun: a padding pass's results are dropped
            mine += logps.items()
    return {i: logps.to(model.device) for i, logps in distributed.gather(mine)}  # torchrun: all


def train(model, views, reference, train_pairs, rng, log, dtype, epochs, batch_size, lr,
          lr_schedule, beta, normalize, score, fast):
    """AdamW over batches of whole tasks, in a new random order each epoch; a log line per step.
    `model` is as distributed.wrap returned it. Returns the number of steps."""
    pairs_of = by_task(train_pairs, task_id=lambda pair: pair[0]["task_id"])
    epoch_batches = []  # each epoch's batches: whole tasks, in a new random order
    for _ in range(epochs):
        order = list(pairs_of)
        rng.shuffle(order)
        epoch_batches.append(task_batches(order, pairs_of, batch_size))
    optimizer, schedule = adamw(model, lr, sum(map(len, epoch_batches)), lr_schedule)
    ids_of, device, step = by_task(views), next(model.parameters()).device, 0
    for epoch, batches in enumerate(epoch_batches, 1):
        for number, batch in enumerate(batches, 1):
            started, scored = time.time(), []
            batch_pairs = sum(len(pairs_of[task_id]) for task_id in batch)
            model.train()
            for task_id, padding in distributed.share(batch, model):  # torchrun: a share of the tasks
                pairs = pairs_of[task_id]
                with autocast(device, dtype):
                    logps = task_logps(model, views, ids_of[task_id], fast)
                # --- SWEET-RL: each trajectory's score from its A_t (Eq. 3), the loss (Eq. 2)
                chosen = trajectory_scores(logps, reference, views,
                                           [trajectory_id(c) for c, _ in pairs], normalize, score)
                rejected = trajectory_scores(logps, reference, views,
                                             [trajectory_id(r) for _, r in pairs], normalize, score)
                loss = bradley_terry_loss(chosen, rejected, beta) * len(pairs) / batch_pairs
                distributed.backward(loss, padding)  # loss.backward(); gradients add up over the batch
                if not padding:
                    tokens = sum(len(views[i]["ids"]) for i in ids_of[task_id]) / len(pairs)
                    scored += [(c, r, tokens) for c, r in zip(chosen.tolist(), rejected.tolist())]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            where = f"step {step} (epoch {epoch}/{epochs}, batch {number}/{len(batches)})"
            log_scores(log, dict(step=step, epoch=epoch), where, scored, beta, started)
    return step


def log_scores(log, record, where, scored, beta, started):
    """A step's line in log.jsonl and on the terminal: `record` and the statistics of the step's
    pairs, each (chosen score, rejected score, tokens per pair), from every torchrun process."""
    scored = distributed.gather(scored)
    chosen, rejected = (torch.tensor([pair[side] for pair in scored]) for side in (0, 1))
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


# ---------------------------------------------------------------- the held-out evaluation

def held_out_metrics(logps, reference, views, eval_pairs, beta, normalize, score):
    """The critic whose log-probs are `logps`, on the held-out pairs: pair accuracy (ties count
    half) with its 95% interval (tasks resampled), mean margin, loss, each pair's margin, task and
    sample indices (chosen, rejected); and {trajectory id: its turn advantages}."""
    ids = dict.fromkeys(trajectory_id(t) for pair in eval_pairs for t in pair)
    advantages = {i: turn_advantages(logps[i], reference[i], views[i]["spans"], normalize)
                  for i in ids}
    chosen, rejected = (trajectory_scores(logps, reference, views,
                                          [trajectory_id(pair[side]) for pair in eval_pairs],
                                          normalize, score) for side in (0, 1))
    margins = (chosen - rejected).tolist()
    outcomes = by_task(zip(eval_pairs, pair_outcomes(margins)), lambda item: item[0][0]["task_id"])
    metrics = {"pair_accuracy": sum(pair_outcomes(margins)) / len(margins),
               "pair_accuracy_ci95": list(bootstrap_mean_ci(
                   {task: [o for _, o in items] for task, items in outcomes.items()})),
               "mean_margin": sum(margins) / len(margins), "margins": margins,
               "pair_task_ids": [c["task_id"] for c, _ in eval_pairs],
               "pair_samples": [[c["sample_idx"], r["sample_idx"]] for c, r in eval_pairs],
               "loss": bradley_terry_loss(chosen, rejected, beta).item()}
    return metrics, advantages


# ---------------------------------------------------------------- the trained critic, scoring replies

@dataclasses.dataclass
class Critic:
    model: torch.nn.Module            # the trained critic π_θ, frozen
    reference_model: torch.nn.Module  # π_ref: the initial weights it was trained from
    tokenizer: object
    use_solution: bool = True
    page_facts: bool = False  # c of a frontend task: its page's facts, not its HTML
    normalize: bool = True
    max_length: int = parser.get_default("max_length")  # its --max-length: replies scored on views cut as in training
    dtype: torch.dtype = torch.float32  # of the forward passes (fp32 weights; bf16 autocast)
    fast: bool = True  # logps_of's fast way, remembering the prefix each model encoded last:
    memory: dict = dataclasses.field(default_factory=lambda: {"critic": {}, "reference": {}})


def load_critic(critic_dir, device=None, dtype=torch.float32, fast=True):
    """A critic folder of critic.py -> Critic scoring in `dtype`; π_ref is rebuilt from the model
    named in its args.json. Weights stay fp32: the critic differs from π_ref by updates too small
    for bf16 weights to hold."""
    with open(os.path.join(critic_dir, "args.json")) as f:
        saved = json.load(f)
    model, tokenizer = load_model(critic_dir, device=device, dtype=torch.float32)
    base = saved["model_path"] if os.path.isdir(saved["model_path"]) else saved["model"]
    reference_model, _ = load_model(base, device=device, dtype=torch.float32)
    return Critic(model, reference_model, tokenizer, not saved["no_solution"], saved.get("page_facts", False),
                  not saved["no_normalize"], saved["max_length"], dtype, fast)


@torch.no_grad()
def score_candidates(critic, task, history, max_turns, candidates):
    """A(o_t, a, c) of each candidate reply a to the dialogue `history` (ending with a user turn),
    played under a budget of `max_turns`: Eq. 3 of the reply's turn, in the view cut to the critic's
    max_length as training cut it (fit_to_length). A reply twice is scored once."""
    if not candidates:
        return []
    distinct = list(dict.fromkeys(candidates))
    views = [fit_to_length(critic.tokenizer, task, history + [{"role": "assistant", "content": reply}], max_turns,
                           critic.use_solution, critic.max_length, critic.page_facts)[:2] for reply in distinct]
    sequences, reply_start = [ids for ids, _ in views], min(spans[-1][0] for _, spans in views)
    with autocast(critic.model.device, critic.dtype):
        critic_logps = logps_of(critic.model, sequences, reply_start, critic.fast,
                                critic.memory["critic"])
        reference_logps = logps_of(critic.reference_model, sequences, reply_start, critic.fast,
                                   critic.memory["reference"])
    scores = {reply: turn_advantages(theta, ref, spans[-1:], critic.normalize).item()
              for reply, theta, ref, (_, spans) in zip(distinct, critic_logps, reference_logps, views)}
    return [scores[reply] for reply in candidates]


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
    tasks, eval_tasks = ({c["task_id"] for c, _ in some} for some in (pairs, eval_pairs))
    used = list({trajectory_id(t): t for pair in pairs for t in pair}.values())
    counts = {"tasks": len(tasks), "trajectories": len(used), "pairs": len(pairs),
              "train_tasks": len(tasks) - len(eval_tasks), "train_pairs": len(train_pairs),
              "eval_tasks": len(eval_tasks), "eval_pairs": len(eval_pairs),
              "eval_task_ids": sorted(eval_tasks)}
    print(f"{len(trajectories)} trajectories, {len(with_turns)} with agent turns; used: "
          f"{len(tasks)} tasks, {len(used)} trajectories, {len(pairs)} pairs -> train "
          f"{counts['train_tasks']} tasks / {len(train_pairs)} pairs, held out {len(eval_tasks)} "
          f"tasks / {len(eval_pairs)} pairs", flush=True)
    if not eval_pairs:
        print(f"note: --eval-fraction {eval_fraction} leaves no held-out task: no held-out accuracy")
    return train_pairs, eval_pairs, used, counts


def save(folder, arguments, base_model, metrics, held_out, advantages, views):
    """Beside the checkpoint: args.json (with the base model's path: π_ref, for load_critic),
    metrics.json, and advantages.jsonl: a line per turn of each held-out dialogue."""
    with open(os.path.join(folder, "args.json"), "w") as f:
        base_path = os.path.abspath(base_model) if os.path.isdir(base_model) else base_model
        json.dump(dict(arguments, model_path=base_path), f, indent=1)
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    write_jsonl(os.path.join(folder, "advantages.jsonl"), [  # turns cut by --max-length: unscored
        {"task_id": t["task_id"], "sample_idx": t["sample_idx"], "turn": turn,
         "advantage": advantage, "reward": t["reward"]} for t in held_out
        for turn, advantage in enumerate(advantages[trajectory_id(t)].tolist(),
                                         views[trajectory_id(t)]["first_turn"])])


def main(args):
    distributed.init()  # torchrun: join the process group; a plain run is the only process
    out = args.out or default_output(args.scored, ".critic")
    print("critic:", json.dumps(vars(args)), f"-> {out}", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    trajectories = trajectories_or_fail(args.scored, rewards_for="the critic")
    train_pairs, eval_pairs, used, counts = pairs_split_by_task(
        trajectories, args.min_reward_gap, args.pairing, args.eval_fraction, rng)
    scoring = dict(beta=args.beta, normalize=not args.no_normalize, score=args.trajectory_score)
    if args.no_normalize:
        print("--no-normalize: each A_t and each trajectory's score are sums over tokens")

    # The critic π_θ: fp32 master weights, forward passes in `dtype`.
    dtype, why = compute_dtype(args.dtype)
    describe_dtype("critic", dtype, why)
    base_model = resolve_model(args.model)
    model, tokenizer = load_model(base_model, trainable=True)
    views = critic_views(tokenizer, used, not args.no_solution, args.max_length, args.page_facts)
    # The fast log-probs by default; FSDP and checkpointing cannot backpropagate into its KV cache.
    fast = not (args.plain or args.fsdp or args.gradient_checkpointing)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded (before π_ref, which FSDP then
    # computes as training does). A plain run trains `model` itself.
    trained = distributed.wrap(model, args.fsdp, dtype)

    # --- SWEET-RL: π_ref of Eq. 3 is the critic's initial weights, its log-probs computed once
    reference = frozen_logps(model, views, by_task(views), dtype, fast, "π_ref log-probs")
    before, after, advantages = {}, {}, {}
    if eval_pairs:  # θ = π_ref before training: the held-out evaluation of those log-probs
        before, _ = held_out_metrics(reference, reference, views, eval_pairs, **scoring)
    folder = partial_folder(out) if distributed.is_main() else None  # renamed to `out` once whole
    with open(os.path.join(folder, "log.jsonl") if folder else os.devnull, "w") as log:
        steps = train(trained, views, reference, train_pairs, rng, log, dtype, args.epochs,
                      args.batch_size, args.lr, args.lr_schedule, **scoring, fast=fast)
    if eval_pairs:
        held_out_ids = by_task(dict.fromkeys(trajectory_id(t) for pair in eval_pairs for t in pair))
        logps = frozen_logps(model, views, held_out_ids, dtype, fast, "held-out log-probs")
        after, advantages = held_out_metrics(logps, reference, views, eval_pairs, **scoring)
    if not distributed.save_checkpoint(folder, model, tokenizer):  # torchrun: the first writes
        return
    held_out = [t for t in used if t["task_id"] in counts["eval_task_ids"]]
    save(folder, vars(args), base_model, dict(counts, steps=steps, before=before, after=after),
         held_out, advantages, views)
    finish_folder(folder, out)
    summary = "no held-out pairs"
    if after:
        summary = (f"held-out pair accuracy {before['pair_accuracy']:.3f} -> "
                   f"{after['pair_accuracy']:.3f} ({len(eval_pairs)} pairs)")
    print(f"done: {steps} steps, {summary} | critic, args.json, metrics.json, advantages.jsonl, "
          f"log.jsonl -> {out}")


if __name__ == "__main__":
    main(parser.parse_args())
