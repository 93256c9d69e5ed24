"""Stage 3 of SWEET-RL: a step-level critic that reads the solution c, trained by Bradley-Terry.

    python critic.py runs/backend_train.scored.jsonl          # -> runs/backend_train.critic/

Reads scored trajectories (evaluate.py's output, or an official ColBench offline file with rewards). The
critic is a causal LM that reads c (the task's solution, never shown to the agent), then what the agent
saw. Its advantage for an agent turn is the mean log-ratio of the turn's tokens against its own frozen
initial weights π_ref (Eq. 3); with --head value, the official frontend critic's, a linear head's value of the
turn's mean hidden state. Two trajectories of one task whose rewards differ make a pair, and training ranks
them by their scores (Eq. 2). policy.py ranks replies with the trained critic (score_candidates).
Writes the critic folder once whole: the checkpoint, args.json, log.jsonl (a line per step), metrics.json
(held-out pair accuracy before and after training) and advantages.jsonl (each held-out turn's advantage).
"""
import argparse
import dataclasses
import json
import os
import functools
import random
import time

import torch
import torch.nn.functional as F

from colbench import distributed
from colbench.cli import (at_least, below_one, fail, fraction_or_zero, non_negative_float, non_negative_int,
                          positive_float, positive_int, trajectories_or_fail)
from colbench.data import (default_output, finish_folder, grouped, partial_folder, split_by_task, split_counts,
                           succeeded, task_batches, task_kind, trajectory_id, write_jsonl)
from colbench.env import agent_messages, turn_budget, without_oldest_exchange
from colbench.fast_logps import shared_prefix_logps, shared_prefix_states
from colbench.frontend import page_summary
from colbench.models import (DTYPES, SCHEDULES, adamw, autocast, compute_dtype, describe_dtype, load_model,
                             padded_batch, resolve_model, tokenize_turns)
from colbench.stats import bootstrap_mean_ci, pair_outcomes

PAIRINGS = ("all", "official")  # the rules of preference_pairs
SCORES = ("token-mean", "turn-sum")  # a trajectory's score in Eq. 2 (trajectory_scores)
HEADS = ("log-ratio", "value", "sequence-value")  # what scores a turn: Eq. 3's A_t, or a value head's V_t (turn_values)
VALUE_HEAD = "value_head.pt"  # --head value: the head's weights, beside the checkpoint
OFFICIAL_FRONTEND_GAP = 0.1  # --pairing official: sweet_rl scripts/evaluate_html.py skips pairs closer in reward

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (each line with a `reward`)")
parser.add_argument("--train-also", metavar="SCORED", help="more scored trajectories, of other tasks, whose pairs "
                    "only train, never held out: e.g. scripted dialogues (harness/warmstart.py; paper: none)")
parser.add_argument("--out", help="critic folder to write (default runs/<stem>.critic)")
parser.add_argument("--model", default="embedded",
                    help="initial critic and π_ref: model folder, hub id or 'embedded' (paper: Llama-3.1-8B-Instruct)")
parser.add_argument("--head", default="log-ratio", choices=HEADS,
                    help="log-ratio: Eq. 3 against π_ref (paper); value, sequence-value: a value head (turn_values)")
parser.add_argument("--beta", type=positive_float, default=0.1, help="β of Eq. 2 (paper: 0.1; official value head: 1)")
parser.add_argument("--lr", type=positive_float, default=1e-4, help="AdamW learning rate (paper: 2e-7)")
parser.add_argument("--epochs", type=positive_int, default=1, help="passes over the training pairs (paper: 4)")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs per optimizer step, at least: a task's pairs stay in one step (paper: 8)")
parser.add_argument("--eval-fraction", type=fraction_or_zero, default=0.5,
                    help="fraction of the paired tasks held out (official: a few percent)")
parser.add_argument("--min-reward-gap", type=non_negative_float, default=0.0,
                    help="pair a task's trajectories only when their rewards differ by this (official frontend: 0.1)")
parser.add_argument("--pairing", default="all", choices=PAIRINGS,
                    help="all: two trajectories of a task whose rewards differ; official: the official scripts' rule")
parser.add_argument("--max-length", type=at_least(32), default=1024,  # fewer cannot hold the prompt's chat markup
                    help="tokens per critic sequence at most; the oldest turns go first (official: 8192)")
parser.add_argument("--no-solution", action="store_true", help="leave out c (paper's ablation: w/o training-time info)")
parser.add_argument("--reference-without-c", action="store_true", help="π_ref reads the dialogue without c, so A_t "
                    "starts at the reply's mutual information with c (frontend; paper: π_ref reads c)")
parser.add_argument("--page-facts", action="store_true", help="frontend: c is the page's facts as told (paper: HTML)")
parser.add_argument("--no-normalize", action="store_true",
                    help="A_t and a trajectory's score sum over tokens (paper's ablation: w/o normalization)")
parser.add_argument("--trajectory-score", default="token-mean", choices=SCORES,
                    help="Eq. 2's: token-mean, the official code's mean over agent tokens, or turn-sum, the paper's")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, decay to 0.1x)")
parser.add_argument("--max-grad-norm", type=positive_float, default=1.0,
                    help="clip the gradients' norm to this at each step (official: 1.0, collab_openrlhf --max_norm)")
parser.add_argument("--weight-decay", type=non_negative_float, default=0.0, help="AdamW's (official: 0, --l2)")
parser.add_argument("--adam-betas", type=below_one, nargs=2, default=(0.9, 0.999), help="AdamW's (official: 0.9 0.95)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="forward passes; auto: bf16 where the hardware computes it natively")
parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the split, the pair order, the model")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--fast", action="store_true", help="the fast log-probs, same numbers (colbench/fast_logps.py)")
scale.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in the backward pass")
scale.add_argument("--fsdp", action="store_true", help="under torchrun: shard weights, gradients and AdamW states")


# ---------------------------------------------------------------- what the critic reads

SOLUTION_HEADER = "Reference solution (shown to you, never to the assistant):\n"  # as critics were trained on


def critic_messages(task, dialogue, max_turns, use_solution=True, page_facts=False):
    """What the agent saw (its system prompt, the budget of `max_turns` turns included, then the dialogue), with c
    put before the system prompt when `use_solution`: the task's solution, or with `page_facts` a frontend task's
    target page as the human knows it, its departures in the words the human tells them (`page_summary`)."""
    messages = agent_messages(task, dialogue, max_turns)
    if use_solution:
        c = page_summary(task) if page_facts and task_kind(task) == "frontend" else task["ground_truth"].strip()
        messages[0] = {"role": "system", "content": SOLUTION_HEADER + c + "\n\n" + messages[0]["content"]}
    return messages


def fit_to_length(tokenizer, task, dialogue, max_turns, use_solution, max_length, page_facts=False, dropped=0):
    """(ids, agent-turn spans, agent turns dropped, what was cut or '') of the critic's view, cut to `max_length`
    tokens: the oldest exchanges go first (without_oldest_exchange), `dropped` of them at least. The problem and c
    always stay; a dialogue too long with one agent turn left is kept whole."""
    for _ in range(dropped):
        dialogue = without_oldest_exchange(dialogue)
    while True:
        ids, spans = tokenize_turns(tokenizer, critic_messages(task, dialogue, max_turns, use_solution, page_facts))
        if len(ids) <= max_length or sum(turn["role"] == "assistant" for turn in dialogue) < 2:
            cuts = ([f"dropped the oldest {dropped} agent turn(s)"] if dropped else []) + (
                [f"still {len(ids)} tokens, kept whole"] if len(ids) > max_length else [])
            return ids, spans, dropped, ", ".join(cuts)  # spans: [start, end) of each agent turn
        dialogue, dropped = without_oldest_exchange(dialogue), dropped + 1


def critic_views(tokenizer, trajectories, use_solution, max_length, page_facts=False, cut_as=None):
    """{trajectory id: view}, each trajectory tokenized once as the critic sees it: the token ids, the [start, end)
    spans of its agent turns, and the number of the first agent turn kept (`cut_as`'s view's, if given)."""
    views, cut = {}, 0
    for t in trajectories:
        ids, spans, dropped, note = fit_to_length(tokenizer, t["task"], t["dialogue_history"], turn_budget(t),
                                                  use_solution, max_length, page_facts,
                                                  cut_as[trajectory_id(t)]["first_turn"] if cut_as else 0)
        views[trajectory_id(t)] = {"ids": ids, "spans": spans, "first_turn": dropped}
        if note and not cut_as and (cut := cut + 1) <= 5:
            print(f"warning: {t['task_id']}/{t['sample_idx']} is over --max-length {max_length}: {note}")
    if cut:
        print(f"warning: {cut} of {len(trajectories)} dialogues were cut to {max_length} tokens")
    return views


# ---------------------------------------------------------------- log-probs, the plain way

def sequence_logps(model, sequences):
    """Token log-probs of id lists, the plain way (the definition): pad, one forward pass, log-softmax in fp32,
    the next tokens' entries. A [len - 1] tensor per sequence, entry i - 1 being log p(token i | the tokens before)."""
    input_ids, attention_mask = padded_batch(sequences, next(model.parameters()).device)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # [n, longest, vocab]
    vocab_logps = logits[:, :-1].float().log_softmax(-1)  # [n, longest - 1, vocab]
    logps = vocab_logps.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # [n, longest - 1]
    return [row[: len(ids) - 1] for row, ids in zip(logps, sequences)]


def sequence_states(model, sequences):
    """The last hidden states of id lists, the plain way: pad, one forward pass of the model's body (its LM head
    unused), in fp32. A [len, hidden] tensor per sequence."""
    input_ids, attention_mask = padded_batch(sequences, next(model.parameters()).device)
    states = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [n, longest, d]
    return [row[: len(ids)].float() for row, ids in zip(states, sequences)]


def task_logps(model, views, trajectory_ids, logps_fn):
    """{trajectory id: token log-probs} of one task's trajectories by `logps_fn`: sequence_logps, or with --fast
    shared_prefix_logps, which encodes once what they share before the first agent token of any (c, the prompt)."""
    if logps_fn is not sequence_logps:  # --fast: told where the tokens read begin
        logps_fn = functools.partial(logps_fn, scored_from=min(views[i]["spans"][0][0] for i in trajectory_ids))
    return dict(zip(trajectory_ids, logps_fn(model, [views[i]["ids"] for i in trajectory_ids])))


def reference_task_logps(model, views, trajectory_ids, reference_views, logps_fn):
    """π_ref's task_logps on the critic's `views`; or with --reference-without-c (`reference_views`: the same
    dialogues without c, cut as `views`) read on those, each turn's then moved to its tokens in `views`, 0 between
    them, which Eq. 3 never reads."""
    if reference_views is None:
        return task_logps(model, views, trajectory_ids, logps_fn)
    logps_by_id = task_logps(model, reference_views, trajectory_ids, logps_fn)
    placed = {i: logps.new_zeros(len(views[i]["ids"]) - 1) for i, logps in logps_by_id.items()}
    for i, logps in logps_by_id.items():
        for (start, end), (s, e) in zip(views[i]["spans"], reference_views[i]["spans"], strict=True):
            assert views[i]["ids"][start:end] == reference_views[i]["ids"][s:e], i  # the same reply's tokens
            placed[i][start - 1:end - 1] = logps[s - 1:e - 1]
    return placed


# --- the SWEET-RL part: the advantage of each agent turn (Eq. 3), a trajectory's score, Eq. 2

def turn_advantages(critic_logps, reference_logps, spans, normalize=True):
    """Eq. 3: A_t = (1/L_t) Σ_l [log π_θ(a_t^l | o_t, a_t^<l, c) − log π_ref(a_t^l | o_t, a_t^<l, c)].
    critic_logps, reference_logps: [seq - 1], entry i - 1 is token i's log-prob; spans: agent turn
    t's tokens are [start, end). normalize=False sums over the tokens (w/o normalization)."""
    log_ratio = critic_logps - reference_logps                        # [seq - 1]
    per_turn = [log_ratio[start - 1:end - 1] for start, end in spans]  # L_t entries each
    return torch.stack([turn.mean() if normalize else turn.sum() for turn in per_turn])  # [turns]


def turn_values(hidden_states, value_head, spans, through=False):
    """--head value, the official frontend critic: V_t = w · (1/L_t) Σ_l h_t^l, the value head w (a linear layer
    [hidden] -> 1, no bias) on the mean of turn t's last hidden states, which have read c and the dialogue before.
    hidden_states: [seq, hidden]; spans: turn t's tokens are [start, end). Returns [turns]. `through` (--head
    sequence-value): the mean of the states [0, end), as the official code averages w · h over a whole sequence."""
    means = torch.stack([hidden_states[0 if through else start:end].mean(0) for start, end in spans])  # [turns, hidden]
    return value_head(means).squeeze(-1)                                               # [turns]


def value_head(model):
    """The official frontend critic's head: a linear layer [hidden] -> 1, no bias, drawn N(0, initializer_range)."""
    head = torch.nn.Linear(model.config.hidden_size, 1, bias=False, device=model.device)
    torch.nn.init.normal_(head.weight, std=getattr(model.config, "initializer_range", 0.02))
    return head


def turn_scores(model, views, trajectory_ids, reference_logps_by_id, logps_fn, normalize=True):
    """{trajectory id: [turns]}, each agent turn's score by the critic `model`: with a value head (--head value)
    its V_t; else its A_t (Eq. 3) against π_ref's `reference_logps_by_id` ({id: [seq - 1]}), by `logps_fn`."""
    if hasattr(model, "value_head"):
        ids, first = [views[i]["ids"] for i in trajectory_ids], min(views[i]["spans"][0][0] for i in trajectory_ids)
        fast = logps_fn is not sequence_logps and not model.value_through  # --fast: the shared prefix encoded once
        states = shared_prefix_states(model, ids, first) if fast else sequence_states(model, ids)
        return {i: turn_values(h, model.value_head, views[i]["spans"], model.value_through)
                for i, h in zip(trajectory_ids, states)}
    critic_logps_by_id = task_logps(model, views, trajectory_ids, logps_fn)
    return {i: turn_advantages(critic_logps_by_id[i], reference_logps_by_id[i], views[i]["spans"], normalize)
            for i in trajectory_ids}


def trajectory_scores(per_turn, views, trajectory_ids, token_mean=True):
    """Each trajectory's score in Eq. 2, [len(trajectory_ids)], from its turns' scores per_turn[id] ([turns]):
    turn-sum, the paper's, Σ_t A_t; with `token_mean`, the official code's mean over all agent tokens,
    Σ_t (L_t / L) A_t. (w/o normalization: A_t sums over tokens, and so does the trajectory, token_mean off.)"""
    scores = []
    for i in trajectory_ids:
        lengths = per_turn[i].new_tensor([end - start for start, end in views[i]["spans"]])  # L_t
        scores.append((per_turn[i] * lengths / lengths.sum() if token_mean else per_turn[i]).sum())
    return torch.stack(scores)


def bradley_terry_loss(chosen_scores, rejected_scores, beta):
    """Eq. 2: L = −log σ(β Σ_t A_t⁺ − β Σ_t A_t⁻). chosen_scores, rejected_scores: [pairs], each a
    trajectory's score. Returns the mean loss over the pairs (a scalar)."""
    return -F.logsigmoid(beta * (chosen_scores - rejected_scores)).mean()


def preference_pairs(trajectories, min_reward_gap=0.0, pairing="all"):
    """Eq. 2's pairs [(chosen, rejected)]: trajectories of one task whose rewards differ (by at least
    `min_reward_gap`), chosen = higher reward; by task, then sample_idx. 'all': every two such trajectories of a
    task. 'official', the official scripts' rule: a backend task pairs only when one of its trajectories succeeded,
    its best (lowest sample_idx among equals) against each worse one; frontend: 'all', OFFICIAL_FRONTEND_GAP apart."""
    pairs = []
    for task_trajectories in grouped(trajectories, lambda t: t["task_id"]).values():
        samples, smallest_gap = sorted(task_trajectories, key=lambda t: t["sample_idx"]), min_reward_gap
        if pairing == "official" and task_kind(samples[0]["task"]) == "backend":
            if not any(succeeded(t) for t in samples):
                continue
            best = max(samples, key=lambda t: float(t["reward"]))  # max keeps the first of equals
            possible_pairs = [(best, other) for other in samples if other is not best]
        else:
            smallest_gap = max(min_reward_gap, OFFICIAL_FRONTEND_GAP) if pairing == "official" else min_reward_gap
            possible_pairs = [(a, b) for i, a in enumerate(samples) for b in samples[i + 1:]]
        for first, second in possible_pairs:
            gap = float(first["reward"]) - float(second["reward"])
            if gap != 0 and abs(gap) >= smallest_gap:
                pairs.append((first, second) if gap > 0 else (second, first))
    return pairs


def trajectory_ids_in(pairs):
    """The ids of the trajectories in `pairs`, each once, in the order they first appear."""
    return list(dict.fromkeys(trajectory_id(t) for pair in pairs for t in pair))


# ---------------------------------------------------------------- the loop

def train(model, views, score_turns, token_mean, batches_of_epoch, autocast_dtype, log, args):
    """AdamW over each epoch's batches (task_batches) with the settings `args`; a log line per step. `model` is
    as distributed.wrap returned it, `score_turns` turn_scores with π_ref's log-probs. Returns the steps."""
    optimizer, schedule = adamw(model, args.lr, sum(map(len, batches_of_epoch)), args.lr_schedule, args.adam_betas,
                                args.weight_decay)
    device, step = next(model.parameters()).device, 0
    model.train()
    for epoch, batches in enumerate(batches_of_epoch, 1):
        for number, batch in enumerate(batches, 1):
            started, pair_scores = time.time(), []
            pairs_per_process = distributed.per_process(sum(map(len, batch)))  # torchrun: DDP, FSDP average over N
            for pairs in distributed.share(batch, model):  # torchrun: a share of the tasks, the passes kept in step
                trajectory_ids = trajectory_ids_in(pairs)
                with autocast(device, autocast_dtype):
                    per_turn = score_turns(model, views, trajectory_ids)  # --- SWEET-RL: each turn's A_t (Eq. 3)
                # --- SWEET-RL: each trajectory's score from its turns', the loss (Eq. 2)
                chosen_scores = trajectory_scores(per_turn, views, [trajectory_id(c) for c, _ in pairs], token_mean)
                rejected_scores = trajectory_scores(per_turn, views, [trajectory_id(r) for _, r in pairs], token_mean)
                loss = bradley_terry_loss(chosen_scores, rejected_scores, args.beta) * len(pairs) / pairs_per_process
                loss.backward()  # gradients add up over the batch's tasks
                tokens = sum(len(views[i]["ids"]) for i in trajectory_ids) / len(pairs)  # for the log: each pair's
                pair_scores += [(*both, tokens) for both in zip(chosen_scores.tolist(), rejected_scores.tolist())]
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            chosen, rejected, tokens = torch.tensor(distributed.gather(pair_scores)).T  # every process's pairs
            margins, seconds = chosen - rejected, time.time() - started
            record = dict(step=step, epoch=epoch, loss=bradley_terry_loss(chosen, rejected, args.beta).item(),
                          pair_accuracy=sum(pair_outcomes(margins.tolist())) / len(margins),
                          margin=margins.mean().item(), chosen_score=chosen.mean().item(),
                          rejected_score=rejected.mean().item(), tokens_per_s=tokens.sum().item() / seconds)
            print(json.dumps(record), file=log, flush=True)
            print(f"step {step} (epoch {epoch}/{len(batches_of_epoch)}, batch {number}/{len(batches)}) | "
                  + " | ".join(f"{name} {value:.4g}" for name, value in list(record.items())[2:]), flush=True)
    return step


# ---------------------------------------------------------------- the held-out evaluation

def held_out_metrics(per_turn, views, eval_pairs, beta, token_mean):
    """The critic whose turns' scores are `per_turn`, on the held-out pairs: pair accuracy (ties count half) with
    its 95% interval (tasks resampled), mean margin, loss, each pair's margin, task and samples."""
    chosen_scores, rejected_scores = (trajectory_scores(per_turn, views, [
        trajectory_id(pair[side]) for pair in eval_pairs], token_mean) for side in (0, 1))
    margins = (chosen_scores - rejected_scores).tolist()
    outcomes_of_task = grouped(zip(eval_pairs, pair_outcomes(margins)), lambda item: item[0][0]["task_id"])
    outcomes_of_task = {task: [outcome for _, outcome in items] for task, items in outcomes_of_task.items()}
    return {"pair_accuracy": sum(pair_outcomes(margins)) / len(margins),
            "pair_accuracy_ci95": list(bootstrap_mean_ci(outcomes_of_task)),
            "mean_margin": sum(margins) / len(margins), "margins": margins,
            "pair_task_ids": [pair[0]["task_id"] for pair in eval_pairs],
            "pair_samples": [[pair[0]["sample_idx"], pair[1]["sample_idx"]] for pair in eval_pairs],
            "loss": bradley_terry_loss(chosen_scores, rejected_scores, beta).item()}


# ---------------------------------------------------------------- the trained critic, scoring replies

@dataclasses.dataclass
class Critic:
    model: torch.nn.Module            # the trained critic π_θ, frozen; with --head value, its value_head too
    reference_model: torch.nn.Module  # π_ref: the initial weights it was trained from (--head value: None)
    tokenizer: object
    use_solution: bool = True
    page_facts: bool = False  # c of a frontend task: its page's facts, not its HTML
    reference_without_c: bool = False  # π_ref reads the dialogue without c
    normalize: bool = True
    max_length: int = parser.get_default("max_length")  # its --max-length: replies scored on views cut as in training
    autocast_dtype: torch.dtype = torch.float32  # of the forward passes (fp32 weights; bf16 autocast)
    logps_fn: object = sequence_logps  # or with --fast colbench/fast_logps.py's remembering() (load_critic)


def load_critic(critic_dir, device=None, autocast_dtype=torch.float32, logps_fn=sequence_logps):
    """A critic folder of critic.py -> Critic scoring in `autocast_dtype` by `logps_fn` (--fast: remembering(), the fast
    path continuing the prefix it encoded last: colbench/fast_logps.py); π_ref is rebuilt from the model it names."""
    with open(os.path.join(critic_dir, "args.json")) as f:
        saved = json.load(f)
    model, tokenizer = load_model(critic_dir, device=device, dtype=torch.float32)
    reference_model = None
    if saved.get("head", "log-ratio") != "log-ratio":
        model.value_head, model.value_through = value_head(model), saved["head"] == "sequence-value"
        model.value_head.load_state_dict(torch.load(os.path.join(critic_dir, VALUE_HEAD), map_location=model.device))
    else:
        base = saved["model_path"] if os.path.isdir(saved["model_path"]) else saved["model"]
        reference_model, _ = load_model(base, device=device, dtype=torch.float32)
    return Critic(model, reference_model, tokenizer, not saved["no_solution"], saved.get("page_facts", False),
                  saved.get("reference_without_c", False), not saved["no_normalize"], saved["max_length"],
                  autocast_dtype, logps_fn)


@torch.no_grad()
def score_candidates(critic, task, history, max_turns, candidates):
    """A(o_t, a, c) of each candidate reply a to `history` (ending with a user turn) under a budget of `max_turns`:
    Eq. 3 of its turn (a value head: its V_t), in its view cut to max_length as in training; a reply twice: once."""
    if not candidates:
        return []
    distinct = list(dict.fromkeys(candidates))

    def view(reply, use_solution, dropped=0):  # the reply's own turn is scored: the last span
        dialogue = history + [{"role": "assistant", "content": reply}]
        ids, spans, dropped, _ = fit_to_length(critic.tokenizer, task, dialogue, max_turns, use_solution,
                                               critic.max_length, critic.page_facts, dropped)
        return {"ids": ids, "spans": spans[-1:], "first_turn": dropped}
    views = {reply: view(reply, critic.use_solution) for reply in distinct}
    reference_views = ({reply: view(reply, False, views[reply]["first_turn"]) for reply in distinct}
                       if critic.reference_without_c else None)
    with autocast(critic.model.device, critic.autocast_dtype):
        reference_logps_by_id = critic.reference_model and reference_task_logps(
            critic.reference_model, views, distinct, reference_views, critic.logps_fn)
        per_turn = turn_scores(critic.model, views, distinct, reference_logps_by_id, critic.logps_fn, critic.normalize)
    return [per_turn[reply].item() for reply in candidates]


# ---------------------------------------------------------------- the stage

def pairs_split_by_task(trajectories, train_only, min_reward_gap, pairing, eval_fraction, rng):
    """The pairs of the trajectories with agent turns split by task, `train_only`'s (--train-also) all in training:
    (train pairs, held-out pairs, the paired trajectories each once, counts for metrics.json). No pair: bad input."""
    if shared := {t["task_id"] for t in train_only} & {t["task_id"] for t in trajectories}:
        fail(f"--train-also: task {min(shared)} is in the scored file too; its trajectories need tasks of their own")
    both = trajectories + train_only
    with_turns = [t for t in both if any(turn["role"] == "assistant" for turn in t["dialogue_history"])]
    pairs = preference_pairs(with_turns, min_reward_gap, pairing)
    if not pairs:
        fail(f"no pairs: no two trajectories of one task have rewards that differ by at least {min_reward_gap} "
             f"under --pairing {pairing} ({len(with_turns)} trajectories). The critic needs contrast.")
    train_pairs, eval_pairs = split_by_task(pairs, eval_fraction, rng, {t["task_id"] for t in train_only})
    heading = f"{len(trajectories)} trajectories (+{len(train_only)} to train only), {len(with_turns)} with agent turns"
    return (train_pairs, eval_pairs, *split_counts(pairs, train_pairs, eval_pairs, heading))


def save(folder, arguments, metrics, trajectories, per_turn, views):
    """Beside the checkpoint: args.json, metrics.json, and advantages.jsonl: a line per turn of each held-out
    dialogue (those of the `trajectories` in `per_turn`), its A_t (--head value: its V_t)."""
    for name, value in (("args.json", arguments), ("metrics.json", metrics)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(value, f, indent=1)
    rows = [dict(task_id=t["task_id"], sample_idx=t["sample_idx"], turn=turn, advantage=advantage, reward=t["reward"])
            for t in trajectories if (i := trajectory_id(t)) in per_turn
            for turn, advantage in enumerate(per_turn[i].tolist(), views[i]["first_turn"])]
    write_jsonl(os.path.join(folder, "advantages.jsonl"), rows)  # turns cut by --max-length: unscored


def refuse_conflicts(args):
    """The flags that cannot go together, refused before any model loads."""
    if args.fast and (args.fsdp or args.gradient_checkpointing):  # neither backpropagates into a shared KV cache
        parser.error("--fast cannot be used with --fsdp or --gradient-checkpointing")
    if args.reference_without_c and (args.head != "log-ratio" or args.no_solution):
        parser.error("--reference-without-c needs --head log-ratio (a π_ref) and c (no --no-solution)")
    if args.head != "log-ratio" and (args.fsdp or int(os.environ.get("WORLD_SIZE", "1")) > 1):  # head outside forward()
        parser.error(f"--head {args.head} trains in one process: not under torchrun or with --fsdp")


def main(args):
    refuse_conflicts(args)
    distributed.init()  # torchrun: join the process group; a plain run is the only process
    out = args.out or default_output(args.scored, ".critic")
    print("critic:", json.dumps(vars(args)), f"-> {out}", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    trajectories = trajectories_or_fail(args.scored, rewards_for="the critic")
    train_only = trajectories_or_fail(args.train_also, rewards_for="the critic") if args.train_also else []
    train_pairs, eval_pairs, used, counts = pairs_split_by_task(
        trajectories, train_only, args.min_reward_gap, args.pairing, args.eval_fraction, rng)
    autocast_dtype, why = compute_dtype(args.dtype)  # the critic π_θ: fp32 weights, forward passes in autocast_dtype
    describe_dtype("critic", autocast_dtype, why)
    base_model = resolve_model(args.model)
    model, tokenizer = load_model(base_model, trainable=True, keep_freed=args.fast)
    views = critic_views(tokenizer, used, not args.no_solution, args.max_length, args.page_facts)
    reference_views = (critic_views(tokenizer, used, False, args.max_length, args.page_facts, cut_as=views)
                       if args.reference_without_c else None)  # π_ref reads `views`, or these: without c
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if args.head != "log-ratio":  # the official frontend critic: a value head, trained with the body; no π_ref
        model.value_head, model.value_through = value_head(model), args.head == "sequence-value"
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded before π_ref. A plain run trains `model` itself.
    trained = distributed.wrap(model, args.fsdp, autocast_dtype)
    logps_fn = shared_prefix_logps if args.fast else sequence_logps  # --fast: the named fast path
    reference_logps_by_id, before, after, per_turn, held_out = None, {}, {}, {}, trajectory_ids_in(eval_pairs)
    if args.head == "log-ratio":  # --- SWEET-RL: π_ref of Eq. 3 is the critic's initial weights, computed once
        reading = functools.partial(reference_task_logps, reference_views=reference_views, logps_fn=logps_fn)
        reference_logps_by_id = distributed.frozen_passes(reading, model, views, list(views), autocast_dtype,
                                                          "π_ref log-probs")
    score_turns = functools.partial(turn_scores, reference_logps_by_id=reference_logps_by_id, logps_fn=logps_fn,
                                    normalize=not args.no_normalize)
    token_mean = args.trajectory_score == "token-mean" and not args.no_normalize
    if eval_pairs:  # before training: θ = π_ref on one view (A_t = 0), the mutual information of a and c, or a head
        zero = args.head == "log-ratio" and reference_views is None
        untrained = ({i: torch.zeros(len(views[i]["spans"])) for i in held_out} if zero else
                     distributed.frozen_passes(score_turns, model, views, held_out, autocast_dtype, "untrained"))
        before = held_out_metrics(untrained, views, eval_pairs, args.beta, token_mean)
    folder = partial_folder(out) if distributed.is_main() else None  # renamed to `out` once whole
    with open(os.path.join(folder, "log.jsonl") if folder else os.devnull, "w") as log:
        batches_of_epoch = task_batches(train_pairs, args.epochs, args.batch_size, rng)
        steps = train(trained, views, score_turns, token_mean, batches_of_epoch, autocast_dtype, log, args)
    if eval_pairs:
        per_turn = distributed.frozen_passes(score_turns, model, views, held_out, autocast_dtype, "held-out")
        after = held_out_metrics(per_turn, views, eval_pairs, args.beta, token_mean)
    if args.head != "log-ratio":  # the checkpoint stays a plain causal LM, which any loader reads
        torch.save(model.value_head.state_dict(), os.path.join(folder, VALUE_HEAD))
        del model.value_head
    if not distributed.save_checkpoint(folder, model, tokenizer):  # torchrun: the first writes
        return
    model_path = os.path.abspath(base_model) if os.path.isdir(base_model) else base_model  # π_ref, for load_critic
    save(folder, dict(vars(args), model_path=model_path), dict(counts, steps=steps, before=before, after=after),
         used, per_turn, views)
    finish_folder(folder, out)
    accuracy = " -> ".join(f"{metrics['pair_accuracy']:.3f}" for metrics in (before, after) if metrics) or "-"
    print(f"done: {steps} steps, held-out pair accuracy {accuracy} ({len(eval_pairs)} pairs) -> {out}")


if __name__ == "__main__":
    main(parser.parse_args())
