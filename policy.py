"""Stage 4 of SWEET-RL: train the agent on critic-ranked candidate replies, turn by turn (Eq. 4).

    python policy.py runs/backend_train.scored.jsonl         # -> runs/backend_train.policy/

At every agent turn state o_t of the offline trajectories (the dialogue before that turn), sample
--candidates replies from the starting policy, score each with the critic's advantage A(o_t, a, c)
(critic.py's critic, colbench/advantage.py), and pair a random top-half candidate (chosen) with a
random bottom-half one (rejected). The policy then trains on these pairs with DPO plus λ·NLL of
the chosen reply. Sampling, ranking and training are three phases, each freeing its models. Writes
the policy folder once whole: candidates.jsonl, pairs.jsonl (TRL's preference format), args.json,
log.jsonl and the checkpoint, which `rollout.py --agent` runs. The paper's baselines (Multi-Turn
DPO, RFT) are colbench/baselines.py. Departures from the paper: docs/DEPARTURES.md.
"""
import argparse
import gc
import json
import math
import os
import random
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from colbench import distributed
from colbench.advantage import load_critic, score_candidates
from colbench.cli import (at_least, fail, fraction, non_negative_float, non_negative_int,
                          positive_float, positive_int, require_server, server_url,
                          trajectories_or_fail)
from colbench.data import (DataError, default_output, finish_folder, partial_folder, read_jsonl,
                           trajectory_subset, write_jsonl)
from colbench.env import agent_messages, turn_budget, turn_states
from colbench.fast_logps import shares_prefix
from colbench.models import (DTYPES, SCHEDULES, EndpointChat, adamw, autocast, chat_text,
                             compute_dtype, describe_dtype, load_model, sample_candidates)
from colbench.training import (completion_logps, log_step, prompt_groups, reference_logps,
                               save_checkpoint, shuffled_batches, tokenize_completion)

RANDOM_CRITIC = "random"  # --critic random: random scores, a control for what the ranking adds

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (evaluate.py's output)")
parser.add_argument("--out", help="policy folder to write (default runs/<stem>.policy)")
parser.add_argument("--critic", help="critic folder from critic.py (default runs/<stem>.critic), "
                                     "or 'random': candidates ranked by random scores (a control)")
parser.add_argument("--model", default="embedded",
                    help="policy to start from: model folder, hub id, or 'embedded'")
parser.add_argument("--candidates", type=at_least(2), default=6,
                    help="replies sampled per turn state (N; 2 at least: a top and a bottom half)")
parser.add_argument("--pairs-per-turn", type=positive_int, default=2,
                    help="preference pairs drawn per turn state")
parser.add_argument("--data-fraction", type=fraction, default=1.0,
                    help="rank the turn states of this random fraction of the trajectories")
parser.add_argument("--sampled", help="candidates.jsonl of an earlier run on the same data: rank "
                                      "its candidates instead of sampling (the controls: the same "
                                      "candidates, another ranking)")
parser.add_argument("--max-new-tokens", type=positive_int, default=64,
                    help="tokens per sampled reply at most")
parser.add_argument("--temperature", type=non_negative_float, default=0.7,
                    help="the candidates' sampling temperature")
parser.add_argument("--beta", type=positive_float, default=0.1, help="DPO temperature β' (Eq. 4)")
parser.add_argument("--nll-coef", type=non_negative_float, default=1.0,
                    help="weight λ of the NLL term (Eq. 4)")
parser.add_argument("--lr", type=positive_float, default=1e-5,
                    help="AdamW learning rate (paper: 2e-7 for 8B models)")
parser.add_argument("--epochs", type=positive_int, default=1, help="passes over the pairs")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs per optimizer step (a turn state's pairs share a forward pass)")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, decay to 0.1x)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="sampling, ranking and training forward passes; auto: bf16 where the "
                         "hardware computes it natively")
parser.add_argument("--seed", type=non_negative_int, default=0,
                    help="seed for subsetting, sampling, pairing and shuffling")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--sample-batch-size", type=positive_int, default=16,
                   help="sequences per batched generate call")
scale.add_argument("--sampler", type=server_url,
                   help="OpenAI-compatible URL of a server (e.g. vLLM) serving --model, to sample "
                        "the candidates there")
scale.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass to save memory")
scale.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW states (FSDP2)")


# --- the SWEET-RL part: rank the candidates, top half against bottom half (§4.3),
# DPO + NLL (Eq. 4)

def top_bottom_pairs(scores, pairs_per_turn, rng):
    """(chosen, rejected) indices: a random candidate of the top half against one of the bottom
    half, by the critic's `scores`. Distinct pairs, at most pairs_per_turn; with an odd count the
    median candidate sits out."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    half = len(order) // 2
    crossing = [(c, r) for c in order[:half] for r in order[len(order) - half:]
                if scores[c] > scores[r]]
    return rng.sample(crossing, min(pairs_per_turn, len(crossing)))


def state_pairs(trajectory, turn, history, replies, scores, pairs_per_turn, rng):
    """pairs.jsonl rows (TRL's preference format) of one turn state: its candidate `replies`, ranked
    by the critic's `scores`, under the prompt the agent saw there."""
    prompt = agent_messages(trajectory["task"], history, turn_budget(trajectory))
    return [{"task_id": trajectory["task_id"], "sample_idx": trajectory["sample_idx"], "turn": turn,
             "prompt": prompt, "chosen": [{"role": "assistant", "content": replies[c]}],
             "rejected": [{"role": "assistant", "content": replies[r]}],
             "chosen_score": scores[c], "rejected_score": scores[r]}
            for c, r in top_bottom_pairs(scores, pairs_per_turn, rng)]


def dpo_nll_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                 reference_rejected_logps, chosen_nll, beta, nll_coef):
    """Paper Eq. 4: DPO on (chosen, rejected) plus λ · NLL of the chosen reply, for each pair.
    Inputs and outputs: [pairs]."""
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps)  # [pairs]
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps)  # [pairs]
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards) + nll_coef * chosen_nll  # [pairs]
    return losses, chosen_rewards.detach(), rejected_rewards.detach()


def train(model, pairs, rng, log_path, dtype, epochs, batch_size, lr, lr_schedule, beta, nll_coef,
          share_prompt):
    """AdamW over shuffled batches of `batch_size` pairs, gradients added up over a batch; a log line
    per step, its statistics averaged over the batch. With share_prompt the pairs of one turn state
    stay side by side and share a forward pass (their prompt encoded once); else one pair a pass.
    `model` is as distributed.wrap returned it; log_path None: no log (a torchrun process but the
    first)."""
    steps = math.ceil(len(pairs) / batch_size) * epochs
    optimizer, schedule = adamw(model, lr, steps, lr_schedule)
    device, history = next(model.parameters()).device, []
    with open(log_path or os.devnull, "w") as log:
        groups = prompt_groups(pairs, share_prompt)
        for step, epoch, batch in shuffled_batches(groups, batch_size, epochs, rng):
            started, measured = time.time(), []
            for group, weight in distributed.share(prompt_groups(batch, share_prompt), model):
                with autocast(device, dtype):
                    sides = [pair[side] for pair in group for side in ("chosen", "rejected")]
                    logps, counts, tokens = completion_logps(model, sides, share_prompt)
                    logps, counts = logps.view(-1, 2), counts.view(-1, 2)  # [pairs, 2]: chosen, rejected
                    reference = torch.stack([pair["reference_logps"] for pair in group]).to(device)  # π_ref's
                    # --- SWEET-RL: Eq. 4 on each pair, its NLL a mean over the chosen reply's tokens
                    losses, chosen_rewards, rejected_rewards = dpo_nll_loss(
                        logps[:, 0], logps[:, 1], reference[:, 0], reference[:, 1],
                        -logps[:, 0] / counts[:, 0], beta, nll_coef)  # [pairs]
                (losses.sum() * weight / len(batch)).backward()  # the mean over the batch
                if weight:
                    for i, loss in enumerate(losses.tolist()):
                        margin = (chosen_rewards[i] - rejected_rewards[i]).item()
                        measured.append({"accuracy": float(margin > 0), "margin": margin,
                                         "chosen_logps": logps[i, 0].item(),
                                         "rejected_logps": logps[i, 1].item(), "loss": loss,
                                         "tokens": tokens if i == 0 else 0})  # a pass's, once
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            history.append(log_step(log, step, epoch, steps, measured, len(batch), started))
    return history


# ---------------------------------------------------------------- the stage's three phases

def sample(states, model_name, sampler, n, max_new_tokens, temperature, batch_size, dtype):
    """Phase 1: n replies at each state from the starting policy, here or on a `sampler` server."""
    conversations = [agent_messages(t["task"], history, turn_budget(t)) for t, _, history in states]
    if sampler:
        server, candidates = EndpointChat(sampler), []
        with tqdm(total=len(conversations), desc="sampling (server)", unit="state") as bar:
            step = 4 * server.concurrency  # conversations in flight at once
            for start in range(0, len(conversations), step):
                chunk = conversations[start:start + step]
                candidates += [[reply.text for reply in replies] for replies in
                               server.sample(chunk, n, max_new_tokens, temperature)]
                bar.update(len(chunk))
        return candidates
    model, tokenizer = load_model(model_name, dtype=dtype)
    prompts = [chat_text(tokenizer, messages, add_generation_prompt=True)
               for messages in conversations]
    candidates = sample_candidates(model, tokenizer, prompts, n, max_new_tokens, temperature,
                                   batch_size)
    del model
    gc.collect()
    return candidates


def state_key(state):
    trajectory, turn, _ = state
    return trajectory["task_id"], trajectory["sample_idx"], turn


def earlier_candidates(path, states):
    """{state key: candidates} from the candidates.jsonl of an earlier run (--sampled); every state
    needed."""
    try:
        rows = [row for _, row in read_jsonl(path)]
        found = {(row["task_id"], row["sample_idx"], row["turn"]): row["candidates"]
                 for row in rows}
    except (DataError, KeyError) as e:
        fail(f"--sampled {path}: not a candidates.jsonl of policy.py ({e})")
    missing = [key for key in map(state_key, states) if key not in found]
    if missing:
        fail(f"--sampled {path}: no candidates for {len(missing)} of the {len(states)} turn "
             f"states, e.g. task {missing[0][0]}, sample {missing[0][1]}, turn {missing[0][2]}: "
             "was it sampled from this data?")
    return found


def rank(states, candidates, critic_dir, pairs_per_turn, seed, rng, dtype):
    """Phase 2: each state's candidates scored by the critic (or at random), then paired: the lines
    of candidates.jsonl (each state's candidates and their scores) and of pairs.jsonl."""
    if critic_dir == RANDOM_CRITIC:
        draw = random.Random(f"random scores {seed}")
        critic = None
    else:
        critic = load_critic(critic_dir, dtype=dtype)
    scored, rows = [], []
    for state, replies in tqdm(list(zip(states, candidates)), desc="ranking", unit="state"):
        trajectory, turn, history = state
        if critic is None:  # as a critic would, it gives the same reply the same score
            drawn = {}
            scores = [drawn.setdefault(reply, draw.random()) for reply in replies]
        else:
            scores = score_candidates(critic, trajectory["task"], history, turn_budget(trajectory),
                                      replies)
        scored.append(dict(zip(("task_id", "sample_idx", "turn"), state_key(state)),
                           candidates=replies, scores=scores))
        rows += state_pairs(trajectory, turn, history, replies, scores, pairs_per_turn, rng)
    del critic
    gc.collect()
    return scored, rows


def main(args):
    distributed.init()  # torchrun: join the process group; a plain run is the only process
    out = args.out or default_output(args.scored, ".policy")
    print("policy:", json.dumps(vars(args)), f"-> {out}/", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    trajectories = trajectory_subset(trajectories_or_fail(args.scored), args.data_fraction, rng)
    states = turn_states(trajectories)
    critic_dir = args.critic or default_output(args.scored, ".critic")
    # What the phases need, checked before any model loads.
    if not states:
        fail("no agent turn follows a user turn in these trajectories: nothing to rank")
    if critic_dir != RANDOM_CRITIC and not os.path.isfile(os.path.join(critic_dir, "args.json")):
        fail(f"no critic at {critic_dir}: run `python critic.py {args.scored}` first, or pass "
             "--critic")
    if args.sampler:
        require_server("--sampler", args.sampler)
    sampled = earlier_candidates(args.sampled, states) if args.sampled else None
    dtype, why = compute_dtype(args.dtype)
    describe_dtype("policy", dtype, why)

    mine = [state for state, weight in distributed.share(states) if weight]  # torchrun: a share
    if sampled:
        candidates = [sampled[state_key(state)] for state in mine]
    else:
        candidates = sample(mine, args.model, args.sampler, args.candidates, args.max_new_tokens,
                            args.temperature, args.sample_batch_size, dtype)
    ranked = rank(mine, candidates, critic_dir, args.pairs_per_turn, args.seed, rng, dtype)
    scored, rows = map(distributed.gather, ranked)  # torchrun: every process's
    print(f"{len(rows)} pairs from {len(states)} turn states of {len(trajectories)} trajectories")
    if not rows:
        fail("no pairs: every candidate of every state scored the same")
    folder = partial_folder(out) if distributed.is_main() else None  # renamed to `out` once whole
    if folder:
        with open(os.path.join(folder, "args.json"), "w") as f:
            json.dump(vars(args), f, indent=2)
        write_jsonl(os.path.join(folder, "candidates.jsonl"), scored)
        write_jsonl(os.path.join(folder, "pairs.jsonl"), rows)

    # Phase 3: DPO + NLL from the starting policy, fp32 master weights (bf16 rounds updates away).
    model, tokenizer = load_model(args.model, trainable=True)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded (before π_ref: FSDP then
    # computes it as training does). A plain run trains `model` itself.
    trained = distributed.wrap(model, args.fsdp, dtype)
    pairs = [{side: tokenize_completion(tokenizer, row["prompt"], row[side])
              for side in ("chosen", "rejected")} for row in rows]
    share_prompt = shares_prefix(args.fsdp, args.gradient_checkpointing)
    # --- SWEET-RL: π_ref of Eq. 4, in each pair
    reference_logps(model, pairs, dtype, share_prompt)
    started, log_path = time.time(), folder and os.path.join(folder, "log.jsonl")
    # The training order has its own seed, so that every torchrun process draws the same one.
    history = train(trained, pairs, random.Random(args.seed), log_path, dtype, args.epochs,
                    args.batch_size, args.lr, args.lr_schedule, args.beta, args.nll_coef,
                    share_prompt)
    if save_checkpoint(folder, model, tokenizer):  # torchrun: only the first process writes
        finish_folder(folder, out)
        last = history[-1]
        print(f"done: {len(history)} steps in {time.time() - started:.0f} s | last step: loss "
              f"{last['loss']:.4g} | accuracy {last['accuracy']:.2f} | margin {last['margin']:.4g} "
              f"-> {out}/ (pairs.jsonl, log.jsonl, checkpoint)")


if __name__ == "__main__":
    main(parser.parse_args())
