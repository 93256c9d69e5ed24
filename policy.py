"""Stage 4 of SWEET-RL: train the agent on critic-ranked candidate replies, turn by turn (Eq. 4).

    python policy.py runs/backend_train.scored.jsonl         # -> runs/backend_train.policy/

At every agent turn state o_t of the offline trajectories (the dialogue before that turn), sample
--candidates replies from the starting policy, score each with the critic's advantage A(o_t, a, c)
(critic.py's `score_candidates`), and pair a random top-half candidate (chosen) with a random
bottom-half one (rejected). The policy then trains on these pairs with DPO plus λ·NLL of the chosen
reply. Sampling, ranking and training are three phases, each freeing its models. Writes the policy
folder once whole: candidates.jsonl, pairs.jsonl (TRL's preference format), args.json, log.jsonl
and the checkpoint, which `rollout.py --agent` runs.
"""
import argparse
import functools
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
from colbench.cli import (at_least, below_one, fail, fraction, is_url, non_negative_float, non_negative_int,
                          positive_float, positive_int, require_server, server_url, trajectories_or_fail)
from colbench.data import (DataError, default_output, finish_folder, grouped, partial_folder, read_jsonl,
                           trajectory_subset, write_jsonl)
from colbench.env import agent_messages, turn_budget, turn_states
from colbench.models import (DTYPES, SCHEDULES, EndpointChat, adamw, autocast, chat_text,
                             compute_dtype, describe_dtype, load_model, sample_candidates,
                             tokenize_turns)
from colbench.fast_logps import remembering, shared_prefix_logps
from critic import load_critic, score_candidates, sequence_logps

RANDOM_CRITIC = "random"  # --critic random: random scores, a control for what the ranking adds
SERVER_BACKLOG = 4  # --sampler: turn states sent per connection of the server at once (ours: it keeps them busy)

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (evaluate.py's output)")
parser.add_argument("--out", help="policy folder to write (default runs/<stem>.policy)")
parser.add_argument("--critic", help="critic folder from critic.py (default runs/<stem>.critic), "
                                     "or 'random': candidates ranked by random scores (a control)")
parser.add_argument("--model", default="embedded",
                    help="policy to start from: model folder, hub id, or 'embedded' "
                         "(paper: Llama-3.1-8B-Instruct)")
parser.add_argument("--candidates", type=at_least(2), default=6,
                    help="replies sampled per turn state (N; 2 at least: a top and a bottom half; "
                         "paper: 16)")
parser.add_argument("--pairs-per-turn", type=positive_int, default=2,
                    help="preference pairs drawn per turn state (paper: 4)")
parser.add_argument("--data-fraction", type=fraction, default=1.0,
                    help="rank the turn states of this random fraction of the trajectories "
                         "(official README: 0.1)")
parser.add_argument("--sampled", help="candidates.jsonl of an earlier run on the same data: rank "
                                      "its candidates instead of sampling (the controls: the same "
                                      "candidates, another ranking)")
parser.add_argument("--max-new-tokens", type=positive_int, default=64,
                    help="tokens per sampled reply at most (official: 1024, sweet_rl scripts/sample_best_of_n.py)")
parser.add_argument("--temperature", type=non_negative_float, default=0.7,
                    help="the candidates' sampling temperature (paper: 1.0)")
parser.add_argument("--beta", type=positive_float, default=0.1,
                    help="DPO temperature β' of Eq. 4 (paper: 0.1)")
parser.add_argument("--nll-coef", type=non_negative_float, default=1.0,
                    help="weight λ of Eq. 4's NLL term (paper: 0.01)")
parser.add_argument("--lr", type=positive_float, default=1e-5,
                    help="AdamW learning rate (paper: 2e-7)")
parser.add_argument("--epochs", type=positive_int, default=1,
                    help="passes over the pairs (paper: 1)")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="pairs per optimizer step (paper: 8)")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, decay to 0.1x)")
parser.add_argument("--max-grad-norm", type=positive_float, default=1.0,
                    help="clip the gradients' norm to this at each step (official: 1.0, collab_openrlhf --max_norm)")
parser.add_argument("--weight-decay", type=non_negative_float, default=0.0,
                    help="AdamW's weight decay (official: 0, collab_openrlhf --l2)")
parser.add_argument("--adam-betas", type=below_one, nargs=2, default=(0.9, 0.999),
                    help="AdamW's β1 β2, PyTorch's (official: 0.9 0.95, collab_openrlhf --adam_betas)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="sampling, ranking and training forward passes; auto: bf16 where the "
                         "hardware computes it natively")
parser.add_argument("--seed", type=non_negative_int, default=0,
                    help="seed for subsetting, sampling, pairing and shuffling")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--fast", action="store_true", help="the fast log-probs, same numbers (colbench/fast_logps.py), "
                   "and the fast sampling, another random stream (colbench/fast_sampling.py)")
scale.add_argument("--sample-batch-size", type=positive_int, default=16,
                   help="sequences per batched generate call")
scale.add_argument("--pairs-per-pass", type=positive_int, default=4,
                   help="a turn state's pairs per forward pass at most (memory; official: 1, --micro_train_batch_size)")
scale.add_argument("--sampler", type=server_url,
                   help="OpenAI-compatible URL of a server (e.g. vLLM) serving --model, to sample "
                        "the candidates there")
scale.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass to save memory")
scale.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW states (FSDP2)")


# ---------------------------------------------------------------- phase 1: sampling

def sample(states, starting_policy, n, max_new_tokens, temperature, batch_size, dtype, shrinking_batch):
    """n replies at each state from the starting policy (a model's name, or the URL of a server serving
    it; here its weights in `dtype`), under the prompt the agent saw there; the plain way, or the shrinking
    batch (--fast)."""
    conversations = [agent_messages(t["task"], history, turn_budget(t)) for t, _, history in states]
    if is_url(starting_policy):
        server, candidates = EndpointChat(starting_policy), []
        with tqdm(total=len(conversations), desc="sampling (server)", unit="state") as bar:
            in_flight = SERVER_BACKLOG * server.concurrency  # conversations sent at once
            for start in range(0, len(conversations), in_flight):
                chunk = conversations[start:start + in_flight]
                candidates += [[reply.text for reply in replies] for replies in
                               server.sample(chunk, n, max_new_tokens, temperature)]
                bar.update(len(chunk))
        return candidates
    model, tokenizer = load_model(starting_policy, dtype=dtype, keep_freed=shrinking_batch)
    prompts = [chat_text(tokenizer, messages, add_generation_prompt=True)
               for messages in conversations]
    candidates = sample_candidates(model, tokenizer, prompts, n, max_new_tokens, temperature,
                                   batch_size, shrinking_batch)
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
        found = {(row["task_id"], row["sample_idx"], row["turn"]): row["candidates"]
                 for _, row in read_jsonl(path)}
    except (DataError, KeyError) as e:
        fail(f"--sampled {path}: not a candidates.jsonl of policy.py ({e})")
    missing = [key for key in map(state_key, states) if key not in found]
    if missing:
        fail(f"--sampled {path}: no candidates for {len(missing)} of the {len(states)} turn "
             f"states, e.g. task {missing[0][0]}, sample {missing[0][1]}, turn {missing[0][2]}: "
             "was it sampled from this data?")
    return found


# --- the SWEET-RL part: phase 2, rank the candidates by the critic, top half against bottom (§4.3)

def top_bottom_pairs(scores, pairs_per_turn, rng):
    """(chosen, rejected) indices: a random candidate of the top half against one of the bottom
    half, by the critic's `scores`. Distinct pairs, at most pairs_per_turn; with an odd count the
    median candidate sits out."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    half = len(order) // 2
    crossing = [(chosen, rejected) for chosen in order[:half] for rejected in order[len(order) - half:]
                if scores[chosen] > scores[rejected]]
    return rng.sample(crossing, min(pairs_per_turn, len(crossing)))


def state_pairs(trajectory, turn, history, replies, scores, pairs_per_turn, rng):
    """pairs.jsonl rows (TRL's preference format) of one turn state: its candidate `replies`, ranked
    by the critic's `scores`, under the prompt the agent saw there."""
    prompt = agent_messages(trajectory["task"], history, turn_budget(trajectory))
    return [{"task_id": trajectory["task_id"], "sample_idx": trajectory["sample_idx"], "turn": turn,
             "prompt": prompt, "chosen": [{"role": "assistant", "content": replies[chosen]}],
             "rejected": [{"role": "assistant", "content": replies[rejected]}],
             "chosen_score": scores[chosen], "rejected_score": scores[rejected]}
            for chosen, rejected in top_bottom_pairs(scores, pairs_per_turn, rng)]


def rank_candidates(states, candidates, critic_dir, pairs_per_turn, seed, rng, autocast_dtype, logps_fn):
    """Each state's candidates scored by the critic (or at random), then paired: the lines of
    candidates.jsonl (each state's candidates and their scores) and of pairs.jsonl."""
    critic = None if critic_dir == RANDOM_CRITIC else load_critic(critic_dir, autocast_dtype=autocast_dtype,
                                                                  logps_fn=logps_fn)
    draw = random.Random(f"random scores {seed}")
    candidate_rows, pair_rows = [], []
    for state, replies in tqdm(list(zip(states, candidates)), desc="ranking", unit="state"):
        trajectory, turn, history = state
        if critic is None:  # as a critic would, it gives the same reply the same score
            drawn = {}
            scores = [drawn.setdefault(reply, draw.random()) for reply in replies]
        else:
            scores = score_candidates(critic, trajectory["task"], history, turn_budget(trajectory),
                                      replies)
        candidate_rows.append(dict(zip(("task_id", "sample_idx", "turn"), state_key(state)),
                                   candidates=replies, scores=scores))
        pair_rows += state_pairs(trajectory, turn, history, replies, scores, pairs_per_turn, rng)
    del critic
    gc.collect()
    return candidate_rows, pair_rows


# ---------------------------------------------------------------- phase 3: log-probs, π_ref, Eq. 4

def tokenize_completion(tokenizer, prompt, completion):
    """(ids, spans) of prompt + completion messages: the token ids, and the [start, end) spans of
    the completion's assistant messages only."""
    ids, spans = tokenize_turns(tokenizer, prompt + completion)
    return ids, spans[len(spans) - sum(m["role"] == "assistant" for m in completion):]


def completion_logps(model, sequences, logps_fn):
    """log π(completion | prompt) of (ids, spans) sequences that share their prompt, by `logps_fn` (critic.py's
    sequence_logps, or with --fast shared_prefix_logps): the span tokens' summed log-probs, [n], and counts, [n]."""
    if logps_fn is not sequence_logps:  # --fast: told where the tokens read begin
        logps_fn = functools.partial(logps_fn, scored_from=min(spans[0][0] for _, spans in sequences))
    logps = logps_fn(model, [ids for ids, _ in sequences])
    # Entry i - 1 of a row is token i's log-prob: a span [start, end) is entries start - 1 to end - 1.
    sums = torch.stack([sum(row[start - 1:end - 1].sum() for start, end in spans)
                        for row, (_, spans) in zip(logps, sequences)])
    counts = sums.new_tensor([sum(end - start for start, end in spans) for _, spans in sequences])
    return sums, counts


def prompt_groups(indices, prompt_of, per_pass):
    """Indices whose prompt_of(index) is the same (a turn state's pairs), `per_pass` at most a group,
    in the order of their first: a group stays side by side in the shuffle and is one forward pass."""
    same_prompt = grouped(indices, prompt_of).values()
    return [same[k:k + per_pass] for same in same_prompt for k in range(0, len(same), per_pass)]


def pair_prompt(pair):
    """The prompt ids both sides of a pair begin with."""
    ids, spans = pair["chosen"]
    return tuple(ids[:spans[0][0]])


@torch.no_grad()
def frozen_pair_logps(model, pairs, autocast_dtype, logps_fn, pairs_per_pass):
    """The summed log-probs of each pair's chosen and rejected completion by `model` as it is, no gradients: π_ref
    of Eq. 4 before training, [len(pairs), 2], computed once, a turn state's pairs (pairs_per_pass at most) a pass."""
    model.eval()
    groups = prompt_groups(range(len(pairs)), lambda i: pair_prompt(pairs[i]), pairs_per_pass)
    mine = []
    for group in tqdm(distributed.share(groups, model), desc="π_ref log-probs", unit="prompt"):  # torchrun: a share
        with autocast(model.device, autocast_dtype):
            sides = [pairs[i][side] for i in group for side in ("chosen", "rejected")]
            logps, _ = completion_logps(model, sides, logps_fn)
        mine += [(i, logps[2 * k:2 * k + 2]) for k, i in enumerate(group)]
    model.train()
    reference_pair_logps = torch.zeros(len(pairs), 2)
    for i, logps in distributed.gather(mine):  # torchrun: every process gets every pair's
        reference_pair_logps[i] = logps
    return reference_pair_logps


def dpo_nll_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                 reference_rejected_logps, chosen_lengths, beta, nll_coef):
    """Paper Eq. 4: DPO on (chosen, rejected) plus λ · NLL of the chosen reply, a mean over its
    tokens, for each pair. Inputs: [pairs] (log-probs summed over a reply; its token count).
    Returns the losses and the two sides' implicit rewards, [pairs] each."""
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps)  # [pairs]
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps)  # [pairs]
    nll = -policy_chosen_logps / chosen_lengths  # [pairs]
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards) + nll_coef * nll  # [pairs]
    return losses, chosen_rewards.detach(), rejected_rewards.detach()


# ---------------------------------------------------------------- the loop

def shuffled_batches(groups, batch_size, epochs, rng):
    """(step, epoch, batch) of each optimizer step, both counted from 1: in every epoch the `groups`
    in a new random order from `rng`, each group's items side by side, cut into batches of
    `batch_size` items (the last one may be smaller; a group may straddle two batches)."""
    steps_per_epoch = math.ceil(sum(len(group) for group in groups) / batch_size)
    for epoch in range(epochs):
        order = [item for group in rng.sample(groups, len(groups)) for item in group]
        for number in range(steps_per_epoch):
            batch = order[number * batch_size:(number + 1) * batch_size]
            yield epoch * steps_per_epoch + number + 1, epoch + 1, batch


def train(model, pairs, reference_pair_logps, rng, logps_fn, autocast_dtype, log, args):
    """AdamW with the settings `args` over shuffled batches of pairs, a turn state's pairs side by side and in
    one forward pass, gradients added up over a batch; a log line per step. `model` is as distributed.wrap
    returned it; `reference_pair_logps`: [pairs, 2], π_ref's log-probs."""
    groups = prompt_groups(range(len(pairs)), lambda i: pair_prompt(pairs[i]), args.pairs_per_pass)
    steps = math.ceil(len(pairs) / args.batch_size) * args.epochs
    optimizer, schedule = adamw(model, args.lr, steps, args.lr_schedule, args.adam_betas, args.weight_decay)
    device, records = next(model.parameters()).device, []
    for step, epoch, batch in shuffled_batches(groups, args.batch_size, args.epochs, rng):
        started, measured = time.time(), []
        pairs_per_process = distributed.per_process(len(batch))  # torchrun: DDP and FSDP average over N processes
        passes = prompt_groups(batch, lambda i: pair_prompt(pairs[i]), args.pairs_per_pass)
        for group in distributed.share(passes, model):  # torchrun: a share of the passes, kept in step
            with autocast(device, autocast_dtype):
                sides = [pairs[i][side] for i in group for side in ("chosen", "rejected")]
                logps, counts = completion_logps(model, sides, logps_fn)
                logps, counts = logps.view(-1, 2), counts.view(-1, 2)  # [pairs, 2]: chosen, rejected
                reference_of_group = reference_pair_logps[group].to(device)  # [pairs, 2]
                # --- SWEET-RL: Eq. 4 on each pair
                losses, chosen_rewards, rejected_rewards = dpo_nll_loss(
                    logps[:, 0], logps[:, 1], reference_of_group[:, 0], reference_of_group[:, 1], counts[:, 0],
                    args.beta, args.nll_coef)
            loss = losses.sum() / pairs_per_process  # this pass's part of the batch mean
            loss.backward()  # gradients add up over the batch's passes
            margins = (chosen_rewards - rejected_rewards).tolist()
            measured += [{"accuracy": float(margin > 0), "margin": margin, "chosen_logps": chosen,
                          "rejected_logps": rejected, "loss": pair_loss, "tokens": counts.sum().item() / len(group)}
                         for margin, (chosen, rejected), pair_loss in zip(margins, logps.tolist(), losses.tolist())]
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        records.append(log_step(log, step, epoch, steps, measured, len(batch), started))
    return records


def log_step(log, step, epoch, steps, measured, batch_size, started):
    """The log record of an optimizer step, written to `log` and printed: the statistics of each
    example (`measured`, from every torchrun process) averaged over the batch, and the reply tokens
    trained on per second since `started`."""
    measured = distributed.gather(measured)
    record = {"step": step, "epoch": epoch,
              **{k: sum(m[k] for m in measured) / batch_size for k in measured[0] if k != "tokens"},
              "tokens_per_s": sum(m["tokens"] for m in measured) / (time.time() - started)}
    log.write(json.dumps(record) + "\n")
    log.flush()
    print(f"step {step}/{steps} | " + " | ".join(
        f"{k} {v:.4g}" for k, v in record.items() if k not in ("step", "epoch")), flush=True)
    return record


# ---------------------------------------------------------------- the stage

def write_ranking(folder, arguments, candidate_rows, pair_rows):
    """args.json, candidates.jsonl (each state's candidates and scores) and pairs.jsonl."""
    with open(os.path.join(folder, "args.json"), "w") as f:
        json.dump(arguments, f, indent=2)
    write_jsonl(os.path.join(folder, "candidates.jsonl"), candidate_rows)
    write_jsonl(os.path.join(folder, "pairs.jsonl"), pair_rows)


def main(args):
    if args.fast and (args.fsdp or args.gradient_checkpointing):  # neither backpropagates into a shared KV cache
        parser.error("--fast cannot be used with --fsdp or --gradient-checkpointing")
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
        fail(f"no critic at {critic_dir}: run `python critic.py {args.scored}` first, or --critic")
    if args.sampler:
        require_server("--sampler", args.sampler)
    sampled = earlier_candidates(args.sampled, states) if args.sampled else None
    forward_dtype, why = compute_dtype(args.dtype)  # sampling's weights, ranking's and training's autocast
    describe_dtype("policy", forward_dtype, why)
    logps_fn = shared_prefix_logps if args.fast else sequence_logps  # --fast: the named fast path
    mine = list(distributed.share(states))  # torchrun: a share of the turn states
    if sampled:
        candidates = [sampled[state_key(state)] for state in mine]
    else:
        candidates = sample(mine, args.sampler or args.model, args.candidates, args.max_new_tokens, args.temperature,
                            args.sample_batch_size, forward_dtype, shrinking_batch=args.fast)  # --fast: fast sampling
    ranked = rank_candidates(mine, candidates, critic_dir, args.pairs_per_turn, args.seed, rng, forward_dtype,
                             remembering() if args.fast else logps_fn)  # continuing the prefix encoded last
    candidate_rows, pair_rows = map(distributed.gather, ranked)  # torchrun: every process's
    print(f"{len(pair_rows)} pairs from {len(states)} turn states of {len(trajectories)} trajectories")
    if not pair_rows:
        fail("no pairs: every candidate of every state scored the same")
    folder = partial_folder(out) if distributed.is_main() else None  # renamed to `out` once whole
    if folder:
        write_ranking(folder, vars(args), candidate_rows, pair_rows)
    # Phase 3: DPO + NLL from the starting policy, fp32 master weights (bf16 rounds updates away).
    model, tokenizer = load_model(args.model, trainable=True, keep_freed=args.fast)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded, π_ref too. A plain run trains `model` itself.
    trained = distributed.wrap(model, args.fsdp, forward_dtype)
    pairs = [{side: tokenize_completion(tokenizer, row["prompt"], row[side])
              for side in ("chosen", "rejected")} for row in pair_rows]
    # --- SWEET-RL: π_ref of Eq. 4, the starting policy's log-probs of each pair
    reference_pair_logps = frozen_pair_logps(model, pairs, forward_dtype, remembering() if args.fast else logps_fn,
                                             args.pairs_per_pass)
    started = time.time()
    with open(os.path.join(folder, "log.jsonl") if folder else os.devnull, "w") as log:
        # The training order has its own seed, so that every torchrun process draws the same one.
        records = train(trained, pairs, reference_pair_logps, random.Random(args.seed), logps_fn, forward_dtype,
                        log, args)
    if distributed.save_checkpoint(folder, model, tokenizer):  # torchrun: only the first writes
        finish_folder(folder, out)
        last = records[-1]
        print(f"done: {len(records)} steps in {time.time() - started:.0f} s | last step: loss "
              f"{last['loss']:.4g} | accuracy {last['accuracy']:.2f} | margin {last['margin']:.4g} "
              f"-> {out}/ (pairs.jsonl, log.jsonl, checkpoint)")


if __name__ == "__main__":
    main(parser.parse_args())
