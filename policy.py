"""Stage 4 of SWEET-RL: train the agent on critic-ranked, step-level preference pairs (DPO + NLL).

    python policy.py runs/backend_train.scored.jsonl         # -> runs/backend_train.policy/

--method sweet (default; paper section 4.3). For every agent turn state o_t of the offline
trajectories (the dialogue up to that turn), sample --candidates replies from the policy, score
each with the critic's advantage A(o_t, a, c) from critic.py (the critic sees the task's reference
solution c), pair a random candidate of the top half (chosen) with one of the bottom half
(rejected), --pairs-per-turn per state, and train the policy with DPO plus an NLL term on the
chosen reply (Eq. 4). Sampling, ranking and training are three phases, each with its own models:
the critic and its reference are freed before training, so peak memory is that of the larger phase.
With --sampler URL the sampling phase runs on an OpenAI-compatible server (vLLM serving --model):
--candidates replies per request (OpenAI's `n`; a server that returns fewer is asked once per
missing reply), many requests at once, with the retries of colbench.models.EndpointChat.
In training, a pair's prompt is encoded once and both replies continue from its KV cache (not with
--fsdp or --gradient-checkpointing: `shares_prefix` says why).
--method mt-dpo (Multi-Turn DPO baseline): whole trajectories of one task paired by reward with
critic.py's pairing rule (--pairing), log-probs summed over all agent turns, the same loss.
--method rft (Rejection Fine-Tuning baseline): supervised fine-tuning on the agent turns of the
successful trajectories. --method sft: the same on every trajectory, scored or not (the demo's
warm start on scripted dialogues, colbench/warmstart.py).

Writes to POLICY_DIR: args.json; pairs.jsonl (sweet, mt-dpo: TRL's conversational preference
format plus the two scores) or sft.jsonl (rft: TRL's prompt-completion format); log.jsonl (one
line per optimizer step); the trained policy and its tokenizer as a Hugging Face checkpoint,
which `python rollout.py TASKS --agent POLICY_DIR` runs.

Where this departs from the paper or the official code:
- Candidates are ranked by the critic's advantage as the paper defines it (Eq. 3, with the
  reference solution c, length-normalized); the official code subtracts the sampling policy's
  log-prob without c instead.
- The frozen reference policy's log-probs are computed once, by the initial policy, before
  training starts: no second copy of the policy is kept in memory.
- NLL(a+ | o_t) is the mean over the chosen reply's tokens (the paper does not say which).
- Pairs whose two scores are equal are dropped: they state no preference.
- At a backend dialogue's last turn, replies without ANSWER_MARKER rank below those with it, whatever
  the critic says (`ranking_keys`): the critic does not see the turn budget, and with the demo's
  budget of 3 turns a third of the states are last turns, where asking is certain failure.
  With --last-turn-twins, each earlier pair this rule would reverse (a question the critic preferred to
  an answer) is also trained reversed, under the prompt of a dialogue whose budget ends at that turn:
  the same state, a shorter budget. Without it, a small policy learns "ask" from the many early-turn
  pairs and asks at the last turn too (the demo's policy then never answered: 0% success).
- Multi-Turn DPO and RFT score each agent turn under the prompt the agent saw at that turn
  (--prompt and --max-turns as in the rollouts; rollout.py records that prompt in each turn's
  `input`): the turns that saw one system prompt share a forward pass, and in the default style the
  last turn of a dialogue that reached --max-turns, which saw a last-turn note, gets one of its own.
  pairs.jsonl and sft.jsonl show each trajectory in TRL's format under its first turn's prompt.
  For official offline files, --prompt official gives the budget-up-front style, not the official
  prompt's own words.
- Frontend trajectories are accepted: a text critic ranks their replies from the dialogue text
  and the reference page's HTML. The paper's frontend critic was a vision-language model with a
  regression head.
- RFT keeps the trajectories whose `success` is true (backend: every test passes); a file without
  `success` counts a reward of 1.0 as success.
- Defaults are sized for the 135M embedded model on CPU: lr 5e-6 (paper: 2e-7 for 8B models).
  Training keeps fp32 master weights; forward passes, sampling and ranking run in bf16 where the
  hardware computes it natively (--dtype auto), else in fp32.
"""
import argparse
import gc
import json
import os
import random
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from colbench import distributed
from colbench.cli import (at_least, fail, fraction, non_negative_float, non_negative_int, positive_float, positive_int,
                          require_server, server_url, trajectories_or_fail)
from colbench.data import default_output, succeeded, task_kind, write_jsonl
from colbench.env import ANSWER_MARKER, PROMPT_STYLES, agent_messages
from colbench.models import (DTYPES, EndpointChat, autocast, chat_text, compute_dtype, default_device, describe_dtype,
                             generate, load_model, plain_messages, sequence_logps, shared_prefix_logps, shares_prefix,
                             tokenize_turns)
from critic import PAIRINGS, load_critic, preference_pairs, score_candidates


parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (evaluate.py's output)")
parser.add_argument("--out", help="policy folder to write (default runs/<stem>.policy)")
parser.add_argument("--critic", help="critic folder from critic.py, for sweet (default runs/<stem>.critic)")
parser.add_argument("--model", default="embedded", help="policy to start from: model folder, hub id, or 'embedded'")
parser.add_argument("--method", default="sweet", choices=["sweet", "mt-dpo", "rft", "sft"],
                    help="SWEET-RL, a baseline, or sft (fine-tuning on every trajectory: the warm start)")
parser.add_argument("--candidates", type=at_least(2), default=16,
                    help="sweet: replies sampled per turn state (N; 2 at least: a top and a bottom half)")
parser.add_argument("--pairs-per-turn", type=positive_int, default=4,
                    help="sweet: preference pairs drawn per turn state")
parser.add_argument("--last-turn-twins", action="store_true",
                    help="sweet, backend: also train each question-over-answer pair reversed, as at a last turn")
parser.add_argument("--data-fraction", type=fraction, default=1.0, help="use this random fraction of the trajectories")
parser.add_argument("--max-turns", type=positive_int, default=10,
                    help="the rollouts' turn budget (their prompts say so)")
parser.add_argument("--prompt", default="default", choices=PROMPT_STYLES,
                    help="the rollouts' prompt style (rollout.py --prompt): each turn is rendered as the agent saw it")
parser.add_argument("--max-new-tokens", type=positive_int, default=256, help="sweet: tokens per sampled reply at most")
parser.add_argument("--temperature", type=non_negative_float, default=1.0,
                    help="sweet: sampling temperature of the candidates")
parser.add_argument("--sample-batch-size", type=positive_int, default=16,
                    help="sweet: sequences per batched generate call")
parser.add_argument("--sampler", type=server_url,
                    help="sweet: OpenAI-compatible URL of a server (e.g. vLLM) serving --model, to sample the "
                         "candidates there instead of in this process")
parser.add_argument("--min-reward-gap", type=non_negative_float, default=0.0,
                    help="mt-dpo: paired rewards differ by at least this (0: any difference)")
parser.add_argument("--pairing", default="all", choices=PAIRINGS,
                    help="mt-dpo: which trajectories of a task make pairs, as critic.py --pairing")
parser.add_argument("--beta", type=positive_float, default=0.1, help="DPO temperature beta' (Eq. 4)")
parser.add_argument("--nll-coef", type=non_negative_float, default=0.01,
                    help="weight lambda of the NLL term on the chosen reply (Eq. 4)")
parser.add_argument("--lr", type=positive_float, default=5e-6, help="AdamW learning rate (paper: 2e-7 for 8B models)")
parser.add_argument("--epochs", type=positive_int, default=1, help="passes over the pairs (rft: the examples)")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs (rft: trajectories) per optimizer step, one per forward pass")
parser.add_argument("--gradient-checkpointing", action="store_true",
                    help="recompute activations in the backward pass to save memory")
parser.add_argument("--fsdp", action="store_true",
                    help="under torchrun: shard the weights, gradients and AdamW states across the ranks (FSDP2) "
                         "instead of DDP replicas")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="sampling, ranking and training forward passes; auto: bf16 where the hardware computes it "
                         "natively")
parser.add_argument("--seed", type=non_negative_int, default=0,
                    help="seed for subsetting, sampling, pairing and shuffling")


def chunks(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


# --- the SWEET-RL part: sample candidates, rank them with the critic, pair top half with bottom half

def turn_states(trajectories):
    """(trajectory, agent turn number, history) for every agent turn; history = the dialogue before it."""
    states = []
    for trajectory in trajectories:
        dialogue = plain_messages(trajectory["dialogue_history"])
        for i, turn in enumerate(dialogue):
            if turn["role"] == "assistant" and i > 0 and dialogue[i - 1]["role"] == "user":
                states.append((trajectory, sum(t["role"] == "assistant" for t in dialogue[:i]), dialogue[:i]))
    return states


@torch.no_grad()
def sample_candidates(model, tokenizer, prompts, n, args):
    """n sampled replies for each prompt; states of similar length share a batched generate call."""
    candidates = [None] * len(prompts)
    by_length = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    bar = tqdm(total=len(prompts), desc="sampling", unit="state")
    for chunk in chunks(by_length, max(1, args.sample_batch_size // n)):
        texts, _ = generate(model, tokenizer, [prompts[i] for i in chunk for _ in range(n)],
                            args.max_new_tokens, args.temperature)
        for k, i in enumerate(chunk):
            candidates[i] = texts[k * n:(k + 1) * n]
        bar.update(len(chunk))
    bar.close()
    return candidates


def sample_from_server(server, conversations, args):
    """n sampled replies for each conversation from an OpenAI-compatible server, many requests at once."""
    candidates = []
    with tqdm(total=len(conversations), desc="sampling (server)", unit="state") as bar:
        for chunk in chunks(conversations, 4 * server.concurrency):
            candidates += [[reply.text for reply in replies] for replies in
                           server.sample(chunk, args.candidates, args.max_new_tokens, args.temperature)]
            bar.update(len(chunk))
    return candidates


def top_bottom_pairs(scores, pairs_per_turn, rng):
    """(chosen, rejected) indices: a random candidate of the top half against one of the bottom half, by
    `scores` (numbers, or anything that sorts: see ranking_keys).

    Distinct pairs, at most pairs_per_turn; with an odd count the median candidate sits out."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    half = len(order) // 2
    crossing = [(c, r) for c in order[:half] for r in order[len(order) - half:] if scores[c] > scores[r]]
    return rng.sample(crossing, min(pairs_per_turn, len(crossing)))


def ranking_keys(task, scores, replies, last_turn):
    """What a state's candidates are ranked by: the critic's scores, except at a backend dialogue's last
    turn, where a reply without ANSWER_MARKER ranks below every reply with it. The environment takes the
    last reply as the answer whatever it says, so a question there fails for certain; the critic does
    not see the turn budget and cannot know it (a departure from the paper: see the module docstring)."""
    if not last_turn or task_kind(task) != "backend":
        return scores
    return [(ANSWER_MARKER in reply, score) for reply, score in zip(replies, scores)]


def pair_row(trajectory, turn, prompt, replies, scores, chosen, rejected):
    """One line of pairs.jsonl (TRL's format): replies[chosen] over replies[rejected] after `prompt`."""
    return {"task_id": trajectory["task_id"], "sample_idx": trajectory["sample_idx"], "turn": turn, "prompt": prompt,
            "chosen": [{"role": "assistant", "content": replies[chosen]}],
            "rejected": [{"role": "assistant", "content": replies[rejected]}],
            "chosen_score": scores[chosen], "rejected_score": scores[rejected]}


def state_pairs(trajectory, turn, history, replies, scores, args, rng):
    """pairs.jsonl rows of one turn state: its candidate `replies`, ranked by the critic's `scores`."""
    task = trajectory["task"]
    last_turn = turn == args.max_turns - 1
    as_last_turn = ranking_keys(task, scores, replies, last_turn=True)
    rows = []
    for c, r in top_bottom_pairs(ranking_keys(task, scores, replies, last_turn), args.pairs_per_turn, rng):
        rows.append(pair_row(trajectory, turn, agent_messages(task, history, args.max_turns, args.prompt),
                             replies, scores, c, r))
        if args.last_turn_twins and not last_turn and as_last_turn[r] > as_last_turn[c]:
            # The same state in a dialogue whose budget ends at this turn: there, the answer wins.
            rows.append(pair_row(trajectory, turn, agent_messages(task, history, turn + 1, args.prompt),
                                 replies, scores, r, c))
    return rows


def sweet_pairs(trajectories, critic_dir, args, rng, device, dtype, rank=0, world=1):
    """Phase 1 samples with the policy, phase 2 ranks with the critic; each phase frees its models."""
    all_states = turn_states(trajectories)
    states = all_states[rank::world]  # torchrun: each rank samples and ranks a share of the states
    conversations = [agent_messages(t["task"], history, args.max_turns, args.prompt) for t, _, history in states]
    if args.sampler:
        candidates = sample_from_server(EndpointChat(args.sampler), conversations, args)
    else:
        model, tokenizer = load_model(args.model, device=device, dtype=dtype)
        prompts = [chat_text(tokenizer, messages, add_generation_prompt=True) for messages in conversations]
        candidates = sample_candidates(model, tokenizer, prompts, args.candidates, args)
        del model
        gc.collect()

    critic = load_critic(critic_dir, device=device, dtype=dtype)
    rows = []
    for (trajectory, turn, history), replies in tqdm(list(zip(states, candidates)), desc="ranking", unit="state"):
        scores = score_candidates(critic, trajectory["task"], history, replies)
        rows += state_pairs(trajectory, turn, history, replies, scores, args, rng)
    del critic
    gc.collect()
    return distributed.gather(rows), len(all_states)  # torchrun: every rank gets all the pairs


def dpo_nll_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                 chosen_nll, beta, nll_coef):
    """Paper Eq. 4: DPO on (chosen, rejected) plus lambda * NLL of the chosen reply. Every input: [pairs]."""
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps)  # [pairs]
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps)  # [pairs]
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards) + nll_coef * chosen_nll  # [pairs]
    return losses.mean(), chosen_rewards.detach(), rejected_rewards.detach()


# --- the baselines' data: whole trajectories

def trajectory_prompt_completion(trajectory, args):
    """The agent's first prompt (system + problem), and the rest of the dialogue as the completion."""
    dialogue = plain_messages(trajectory["dialogue_history"])
    return agent_messages(trajectory["task"], dialogue[:1], args.max_turns, args.prompt), dialogue[1:]


def mt_dpo_pairs(trajectories, args):
    """Multi-Turn DPO's pairs (a baseline): whole trajectories of a task, paired by reward with critic.py's
    rule, as rows in TRL's preference format."""
    rows = []
    for chosen, rejected in preference_pairs(trajectories, args.min_reward_gap, args.pairing):
        prompt, chosen_completion = trajectory_prompt_completion(chosen, args)
        _, rejected_completion = trajectory_prompt_completion(rejected, args)
        rows.append({"task_id": chosen["task_id"], "chosen_sample_idx": chosen["sample_idx"],
                     "rejected_sample_idx": rejected["sample_idx"], "prompt": prompt,
                     "chosen": chosen_completion, "rejected": rejected_completion,
                     "chosen_score": chosen["reward"], "rejected_score": rejected["reward"]})
    return rows


def sft_examples(trajectories, args, successful_only):
    """The agent turns of each trajectory as a completion (rft: of the successful ones only)."""
    rows = []
    for trajectory in trajectories:
        if not successful_only or succeeded(trajectory):
            prompt, completion = trajectory_prompt_completion(trajectory, args)
            rows.append({"task_id": trajectory["task_id"], "sample_idx": trajectory["sample_idx"],
                         "prompt": prompt, "completion": completion})
    return rows


# --- log-probs of completions, and the training loop

def tokenize_completion(tokenizer, prompt, completion):
    """Token ids of prompt + completion, and the spans of the completion's assistant messages only."""
    ids, spans = tokenize_turns(tokenizer, prompt + completion)
    return ids, spans[len(spans) - sum(m["role"] == "assistant" for m in completion):]


def reply_pair_example(tokenizer, row):
    """A training example of a preference row whose chosen and rejected sides each reply to its prompt."""
    return {side: [tokenize_completion(tokenizer, row["prompt"], row[side])] for side in ("chosen", "rejected")}


def agent_turn_sequences(tokenizer, trajectory, args):
    """[(ids, spans)] that score every agent turn of a trajectory under the prompt the agent saw at that
    turn: one sequence for each run of turns that saw the same system prompt, the turns that follow
    it belonging to later sequences. Default style: a dialogue that reached --max-turns gives two, its
    last turn having seen a last-turn note; otherwise one."""
    dialogue = plain_messages(trajectory["dialogue_history"])
    runs = []  # (the messages through the run's last turn, how many agent turns the run holds)
    for i, turn in enumerate(dialogue):
        if turn["role"] != "assistant":
            continue
        messages = agent_messages(trajectory["task"], dialogue[:i], args.max_turns, args.prompt) + [turn]
        if runs and runs[-1][0][0] == messages[0]:
            runs[-1] = (messages, runs[-1][1] + 1)
        else:
            runs.append((messages, 1))
    sequences = []
    for messages, turns in runs:
        ids, spans = tokenize_turns(tokenizer, messages)
        sequences.append((ids, spans[-turns:]))
    return sequences


def completion_logps(model, sequences, share_prompt=True):
    """Summed log-probs of the completion tokens (the spans) of sequences that begin alike, and how
    many tokens were scored and processed: [n], [n], int. One reply each for sweet; for mt-dpo and
    rft, the agent turns of a trajectory that saw one prompt. With `share_prompt` the tokens all
    sequences begin with are encoded once and their KV cache serves every sequence (gradients flow
    through the cache); else each sequence is encoded whole."""
    ids_list = [ids for ids, _ in sequences]
    if share_prompt:
        logps, shared = shared_prefix_logps(model, ids_list, min(spans[0][0] for _, spans in sequences))
    else:
        logps, shared = sequence_logps(model, ids_list), 1  # nothing shared: every token encoded in its row
    # Entry i - 1 of a row is token i's log-prob: a span [start, end) is entries start - 1 to end - 1.
    sums = torch.stack([sum(row[start - 1:end - 1].sum() for start, end in spans)
                        for row, (_, spans) in zip(logps, sequences)])
    counts = torch.tensor([float(sum(end - start for start, end in spans)) for _, spans in sequences],
                          device=sums.device)
    tokens = shared - 1 + sum(len(ids) - shared + 1 for ids in ids_list)  # the prefix once, then each continuation
    return sums, counts, tokens


def pair_logps(model, example, share_prompt=True):
    """Summed log-probs and token counts of a pair's chosen and rejected side, each side one or more
    sequences (mt-dpo: one per prompt the agent saw), all in one call: [2], [2], tokens processed."""
    sides = len(example["chosen"])
    logps, counts, tokens = completion_logps(model, example["chosen"] + example["rejected"], share_prompt)
    return (torch.stack([logps[:sides].sum(), logps[sides:].sum()]),
            torch.stack([counts[:sides].sum(), counts[sides:].sum()]), tokens)


@torch.no_grad()
def add_reference_logps(model, examples, dtype=torch.float32, rank=0, world=1, share_prompt=True):
    """The frozen reference policy pi_ref = the policy before training: its log-probs, computed once,
    the way training computes the policy's (`share_prompt`, see shares_prefix)."""
    model.eval()
    mine = []
    # torchrun: each rank takes a share, then all share all; padded (weight 0): FSDP needs all ranks in each forward
    shares = distributed.shard(range(len(examples)), rank, world)
    for i, weight in tqdm(shares, desc="reference log-probs", unit="pair"):
        with autocast(model.device, dtype):
            logps, _, _ = pair_logps(model, examples[i], share_prompt)
        if weight:
            mine.append((i, logps.tolist()))
    for i, (chosen, rejected) in distributed.gather(mine):
        examples[i]["reference_chosen_logps"], examples[i]["reference_rejected_logps"] = chosen, rejected
    model.train()


def example_loss(model, example, args):
    """The loss of one pair (rft: one trajectory), its statistics, and the tokens processed."""
    if args.method in ("rft", "sft"):
        logps, counts, tokens = completion_logps(model, example["completion"], shares_prefix(args))
        nll = -logps.sum() / counts.sum()  # the mean over the trajectory's agent tokens
        return nll, {"nll": nll.item()}, tokens
    logps, counts, tokens = pair_logps(model, example, shares_prefix(args))  # [2] each: chosen, rejected
    chosen_logps, rejected_logps = logps[:1], logps[1:]
    reference_chosen = torch.tensor([example["reference_chosen_logps"]], device=logps.device)
    reference_rejected = torch.tensor([example["reference_rejected_logps"]], device=logps.device)
    chosen_nll = -chosen_logps / counts[:1]  # per token
    # --- SWEET-RL: DPO on the critic-ranked pair plus λ · NLL of the chosen reply (Eq. 4)
    loss, chosen_rewards, rejected_rewards = dpo_nll_loss(chosen_logps, rejected_logps, reference_chosen,
                                                          reference_rejected, chosen_nll, args.beta, args.nll_coef)
    return loss, {"accuracy": float(chosen_rewards.item() > rejected_rewards.item()),
                  "margin": (chosen_rewards - rejected_rewards).item(),
                  "chosen_logps": logps[0].item(), "rejected_logps": logps[1].item()}, tokens


def train(model, examples, args, rng, log_path, dtype=torch.float32, rank=0, world=1):
    """AdamW over shuffled batches, one pair per forward pass, gradients accumulated over a batch;
    one log line per optimizer step, its statistics averaged over the batch. `model` is as
    distributed.wrap returned it."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    steps_per_epoch = (len(examples) + args.batch_size - 1) // args.batch_size
    history = []
    with open(log_path if rank == 0 else os.devnull, "w") as log:  # torchrun: rank 0 alone writes
        for epoch in range(args.epochs):
            order = rng.sample(examples, len(examples))
            for step, batch in enumerate(chunks(order, args.batch_size), epoch * steps_per_epoch + 1):
                start, measured = time.time(), []
                shares = distributed.shard(batch, rank, world)  # torchrun: this rank's pairs
                for i, (example, weight) in enumerate(shares):  # gradients accumulate over the batch
                    with distributed.sync_on_last(model, i, len(shares)):  # torchrun: DDP communicates on the last
                        with autocast(model.device, dtype):
                            # --- SWEET-RL: the loss of one pair, Eq. 4 (see example_loss; rft, sft: the NLL)
                            loss, stats, example_tokens = example_loss(model, example, args)
                        # torchrun: `weight * world` keeps the mean over the global batch (DDP, FSDP average over ranks)
                        (loss * weight * world / len(batch)).backward()
                    if weight:
                        measured.append(dict(stats, loss=loss.item(), tokens=example_tokens))
                measured = distributed.gather(measured)  # torchrun: the whole global batch, for the log
                tokens = sum(m.pop("tokens") for m in measured)
                totals = {name: sum(m[name] for m in measured) for name in measured[0]}
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
                record = {"step": step, "epoch": epoch + 1, **{k: v / len(batch) for k, v in totals.items()},
                          "tokens_per_s": tokens / (time.time() - start)}
                log.write(json.dumps(record) + "\n")
                log.flush()
                history.append(record)
                print(f"step {step}/{steps_per_epoch * args.epochs} | " + " | ".join(
                    f"{k} {v:.4g}" for k, v in record.items() if k not in ("step", "epoch")), flush=True)
    return history


def main(args):
    rank, world = distributed.init()  # torchrun: this process's rank and the number of processes
    out = args.out or default_output(args.scored, ".policy")
    print("policy:", json.dumps(vars(args)), f"-> {out}/", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    needs_rewards = args.method in ("mt-dpo", "rft")
    trajectories = trajectories_or_fail(args.scored, rewards_for=args.method if needs_rewards else None)
    if args.data_fraction < 1.0:
        keep = max(1, round(args.data_fraction * len(trajectories)))
        trajectories = [trajectories[i] for i in sorted(rng.sample(range(len(trajectories)), keep))]
    if args.method == "sweet":  # what sampling and ranking need, checked before any model loads
        critic_dir = args.critic or default_output(args.scored, ".critic")
        if not turn_states(trajectories):
            fail("no agent turn follows a user turn in these trajectories: nothing to rank")
        if not os.path.isfile(os.path.join(critic_dir, "args.json")):
            fail(f"no critic at {critic_dir}: run `python critic.py {args.scored}` first, or pass --critic")
        if args.sampler:
            require_server("--sampler", args.sampler)
    device = default_device()
    dtype, why = compute_dtype(args.dtype, device)
    describe_dtype("policy", dtype, why)

    if args.method == "sweet":
        rows, states = sweet_pairs(trajectories, critic_dir, args, rng, device, dtype, rank, world)
        print(f"{len(rows)} pairs from {states} turn states of {len(trajectories)} trajectories")
    elif args.method == "mt-dpo":
        rows = mt_dpo_pairs(trajectories, args)
        print(f"{len(rows)} trajectory pairs from {len(trajectories)} trajectories")
    else:
        rows = sft_examples(trajectories, args, successful_only=args.method == "rft")
        kept = "successful trajectories" if args.method == "rft" else "trajectories"
        print(f"{len(rows)} {kept} of {len(trajectories)} to fine-tune on")
    if not rows and args.method == "sweet":
        fail("no pairs: every candidate of every state scored the same")
    if not rows and args.method == "mt-dpo":
        fail(f"no pairs: no two trajectories of a task differ in reward by at least {args.min_reward_gap} "
             f"under --pairing {args.pairing}")
    if not rows:
        fail("no successful trajectory to fine-tune on" if args.method == "rft" else "no trajectory to fine-tune on")
    # The outputs begin once there is something to train on.
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "args.json") if rank == 0 else os.devnull, "w") as f:
        json.dump(vars(args), f, indent=2)
    data_path = os.path.join(out, "sft.jsonl" if args.method in ("rft", "sft") else "pairs.jsonl")
    write_jsonl(data_path if rank == 0 else os.devnull, rows)

    # fp32 master weights (bf16 would round lr-sized updates away); forward passes in `dtype`
    model, tokenizer = load_model(args.model, trainable=True, device=device)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded. Wrapped before π_ref is computed, so
    # that π_ref's forward passes are training's (FSDP: bf16 weights where `dtype` is bf16).
    trained = distributed.wrap(model, args.fsdp, dtype)
    # The baselines score whole trajectories, each agent turn under the prompt it was sampled with.
    by_key = {(t["task_id"], t["sample_idx"]): t for t in trajectories}
    if args.method in ("rft", "sft"):
        examples = [{"completion": agent_turn_sequences(tokenizer, by_key[row["task_id"], row["sample_idx"]], args)}
                    for row in rows]
    elif args.method == "mt-dpo":
        examples = [{side: agent_turn_sequences(tokenizer, by_key[row["task_id"], row[f"{side}_sample_idx"]], args)
                     for side in ("chosen", "rejected")} for row in rows]
    else:
        examples = [reply_pair_example(tokenizer, row) for row in rows]
    if args.method not in ("rft", "sft"):
        add_reference_logps(model, examples, dtype, rank, world, shares_prefix(args))
    start = time.time()
    # The training order has its own seed, so every torchrun rank draws the same one.
    history = train(trained, examples, args, random.Random(args.seed), os.path.join(out, "log.jsonl"), dtype, rank,
                    world)
    weights = distributed.full_state_dict(model)  # torchrun --fsdp: every rank sends its shards to rank 0
    if rank > 0:
        return  # torchrun: rank 0 alone writes the checkpoint
    model.save_pretrained(out, state_dict=weights)
    tokenizer.save_pretrained(out)
    last = history[-1]
    if "margin" in last:
        summary = f"accuracy {last['accuracy']:.2f} | margin {last['margin']:.4g}"
    else:
        summary = f"nll {last['nll']:.4g}"
    print(f"done: {len(history)} steps in {time.time() - start:.0f} s | last step: loss {last['loss']:.4g} | {summary} "
          f"-> {out}/ ({os.path.basename(data_path)}, log.jsonl, checkpoint)")


if __name__ == "__main__":
    main(parser.parse_args())
