"""Stage 4 of SWEET-RL: train the agent on critic-ranked candidate replies, turn by turn (DPO + NLL, Eq. 4).

    python policy.py runs/backend_train.scored.jsonl         # -> runs/backend_train.policy/

At every agent turn state o_t of the offline trajectories (the dialogue before that turn), sample
--candidates replies from the starting policy, score each with the critic's advantage A(o_t, a, c)
(critic.py), and pair a random top-half candidate (chosen) with a random bottom-half one (rejected).
The policy then trains on these pairs with DPO plus λ·NLL of the chosen reply. Sampling, ranking and
training are three phases, each freeing its models. Writes the policy folder: pairs.jsonl (TRL's
preference format), args.json, log.jsonl and the checkpoint, which `rollout.py --agent` runs.
The baselines (Multi-Turn DPO, RFT) and the warm start are in baselines.py, with this loop and loss.
Departures from the paper: docs/DEPARTURES.md.
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
from colbench.data import DataError, default_output, read_jsonl, task_subset, write_jsonl
from colbench.env import agent_messages, turn_budget
from colbench.fast_logps import shared_prefix_logps, shares_prefix
from colbench.models import (DTYPES, SCHEDULES, EndpointChat, adamw, autocast, chat_text, compute_dtype,
                             describe_dtype, generate, load_model, plain_messages, sequence_logps, tokenize_turns)
from critic import load_critic, score_candidates

RANDOM_CRITIC = "random"  # --critic random: a random score per distinct reply, a control for what the ranking adds

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories JSONL (evaluate.py's output)")
parser.add_argument("--out", help="policy folder to write (default runs/<stem>.policy)")
parser.add_argument("--critic", help="critic folder from critic.py (default runs/<stem>.critic), or 'random': "
                                     "candidates ranked by random scores (a control)")
parser.add_argument("--model", default="embedded", help="policy to start from: model folder, hub id, or 'embedded'")
parser.add_argument("--candidates", type=at_least(2), default=6,
                    help="replies sampled per turn state (N; 2 at least: a top and a bottom half)")
parser.add_argument("--pairs-per-turn", type=positive_int, default=2, help="preference pairs drawn per turn state")
parser.add_argument("--data-fraction", type=fraction, default=1.0,
                    help="use the trajectories of this random fraction of the tasks (as baselines.py, same --seed)")
parser.add_argument("--sampled", help="candidates.jsonl of an earlier run on the same data: rank its candidates "
                                      "instead of sampling (the controls: the same candidates, another ranking)")
parser.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens per sampled reply at most")
parser.add_argument("--temperature", type=non_negative_float, default=0.7, help="the candidates' sampling temperature")
parser.add_argument("--beta", type=positive_float, default=0.1, help="DPO temperature β' (Eq. 4)")
parser.add_argument("--nll-coef", type=non_negative_float, default=1.0, help="weight λ of the NLL term (Eq. 4)")
parser.add_argument("--lr", type=positive_float, default=2e-5, help="AdamW learning rate (paper: 2e-7 for 8B models)")
parser.add_argument("--epochs", type=positive_int, default=1, help="passes over the pairs")
parser.add_argument("--batch-size", type=positive_int, default=8, help="pairs per optimizer step, one per forward pass")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, cosine decay to 0.1x the LR)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="sampling, ranking and training forward passes; auto: bf16 where the hardware computes it "
                         "natively")
parser.add_argument("--seed", type=non_negative_int, default=0,
                    help="seed for subsetting, sampling, pairing and shuffling")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--sample-batch-size", type=positive_int, default=16, help="sequences per batched generate call")
scale.add_argument("--sampler", type=server_url,
                   help="OpenAI-compatible URL of a server (e.g. vLLM) serving --model, to sample the candidates there")
scale.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass to save memory")
scale.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW states across the processes (FSDP2)")


def chunks(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


# ---------------------------------------------------------------- sampling candidate replies at turn states

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
    with tqdm(total=len(prompts), desc="sampling", unit="state") as bar:
        for chunk in chunks(by_length, max(1, args.sample_batch_size // n)):
            texts, _ = generate(model, tokenizer, [prompts[i] for i in chunk for _ in range(n)],
                                args.max_new_tokens, args.temperature)
            for k, i in enumerate(chunk):
                candidates[i] = texts[k * n:(k + 1) * n]
            bar.update(len(chunk))
    return candidates


def sample_from_server(url, conversations, args):
    """n sampled replies for each conversation from an OpenAI-compatible server, many requests at once."""
    server, candidates = EndpointChat(url), []
    with tqdm(total=len(conversations), desc="sampling (server)", unit="state") as bar:
        for chunk in chunks(conversations, 4 * server.concurrency):
            candidates += [[reply.text for reply in replies] for replies in
                           server.sample(chunk, args.candidates, args.max_new_tokens, args.temperature)]
            bar.update(len(chunk))
    return candidates


# --- the SWEET-RL part: rank the candidates, pair top half with bottom half (§4.3), DPO + NLL (Eq. 4)

def top_bottom_pairs(scores, pairs_per_turn, rng):
    """(chosen, rejected) indices: a random candidate of the top half against one of the bottom half, by the
    critic's `scores`. Distinct pairs, at most pairs_per_turn; with an odd count the median candidate sits out."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    half = len(order) // 2
    crossing = [(c, r) for c in order[:half] for r in order[len(order) - half:] if scores[c] > scores[r]]
    return rng.sample(crossing, min(pairs_per_turn, len(crossing)))


def state_pairs(trajectory, turn, history, replies, scores, pairs_per_turn, rng):
    """pairs.jsonl rows (TRL's preference format) of one turn state: its candidate `replies`, ranked by the
    critic's `scores`, under the prompt the agent saw there."""
    prompt = agent_messages(trajectory["task"], history, turn_budget(trajectory))
    return [{"task_id": trajectory["task_id"], "sample_idx": trajectory["sample_idx"], "turn": turn, "prompt": prompt,
             "chosen": [{"role": "assistant", "content": replies[c]}],
             "rejected": [{"role": "assistant", "content": replies[r]}],
             "chosen_score": scores[c], "rejected_score": scores[r]}
            for c, r in top_bottom_pairs(scores, pairs_per_turn, rng)]


def dpo_nll_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                 chosen_nll, beta, nll_coef):
    """Paper Eq. 4: DPO on (chosen, rejected) plus lambda * NLL of the chosen reply. Every input: [pairs]."""
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps)  # [pairs]
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps)  # [pairs]
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards) + nll_coef * chosen_nll  # [pairs]
    return losses.mean(), chosen_rewards.detach(), rejected_rewards.detach()


# ---------------------------------------------------------------- log-probs of replies, π_ref, the loop

def tokenize_completion(tokenizer, prompt, completion):
    """Token ids of prompt + completion, and the spans of the completion's assistant messages only."""
    ids, spans = tokenize_turns(tokenizer, prompt + completion)
    return ids, spans[len(spans) - sum(m["role"] == "assistant" for m in completion):]


def reply_pair_example(tokenizer, row):
    """A training example of a pairs.jsonl row: its chosen and rejected sides, each one sequence."""
    return {side: [tokenize_completion(tokenizer, row["prompt"], row[side])] for side in ("chosen", "rejected")}


def completion_logps(model, sequences, share_prompt=True):
    """Summed log-probs of the completion tokens (the spans) of sequences, their token counts, and the
    tokens processed: [n], [n], int. The plain way: each sequence encoded whole. The fast way
    (share_prompt): the tokens all sequences begin with (the prompt) encoded once, its KV cache serving
    each (colbench.fast_logps.shared_prefix_logps; gradients flow through the cache)."""
    ids_list = [ids for ids, _ in sequences]
    if not share_prompt:
        logps, shared = sequence_logps(model, ids_list), 1  # nothing shared: every token encoded in its row
    else:
        logps, shared = shared_prefix_logps(model, ids_list, min(spans[0][0] for _, spans in sequences))
    # Entry i - 1 of a row is token i's log-prob: a span [start, end) is entries start - 1 to end - 1.
    sums = torch.stack([sum(row[start - 1:end - 1].sum() for start, end in spans)
                        for row, (_, spans) in zip(logps, sequences)])
    counts = torch.tensor([float(sum(end - start for start, end in spans)) for _, spans in sequences],
                          device=sums.device)
    tokens = shared - 1 + sum(len(ids) - shared + 1 for ids in ids_list)  # the prefix once, then each continuation
    return sums, counts, tokens


def pair_logps(model, example, share_prompt=True):
    """Summed log-probs and token counts of a pair's chosen and rejected side, each side one or more
    sequences (baselines.py's Multi-Turn DPO: one per prompt the agent saw), in one call: [2], [2], tokens."""
    sides = len(example["chosen"])
    logps, counts, tokens = completion_logps(model, example["chosen"] + example["rejected"], share_prompt)
    return (torch.stack([logps[:sides].sum(), logps[sides:].sum()]),
            torch.stack([counts[:sides].sum(), counts[sides:].sum()]), tokens)


@torch.no_grad()
def reference_logps(model, examples, dtype=torch.float32, share_prompt=True):
    """π_ref of Eq. 4 is the policy before training: its log-probs of each pair, computed once and kept in
    the example, the way training computes the policy's."""
    model.eval()
    mine = []
    for i, weight in tqdm(list(distributed.share(range(len(examples)))), desc="π_ref log-probs", unit="pair"):
        with autocast(model.device, dtype):
            logps, _, _ = pair_logps(model, examples[i], share_prompt)
        if weight:  # torchrun: weight 0 marks a padding pass
            mine.append((i, logps.tolist()))
    for i, (chosen, rejected) in distributed.gather(mine):  # torchrun: every process gets every pair's
        examples[i]["reference_chosen_logps"], examples[i]["reference_rejected_logps"] = chosen, rejected
    model.train()


def pair_loss(model, example, args):
    """Eq. 4 on one pair: (the loss, its statistics for the log, the tokens processed)."""
    logps, counts, tokens = pair_logps(model, example, shares_prefix(args))  # [2] each: chosen, rejected
    reference_chosen = torch.tensor([example["reference_chosen_logps"]], device=logps.device)
    reference_rejected = torch.tensor([example["reference_rejected_logps"]], device=logps.device)
    chosen_nll = -logps[:1] / counts[:1]  # the mean over the chosen reply's tokens
    loss, chosen_rewards, rejected_rewards = dpo_nll_loss(logps[:1], logps[1:], reference_chosen, reference_rejected,
                                                          chosen_nll, args.beta, args.nll_coef)
    return loss, {"accuracy": float(chosen_rewards.item() > rejected_rewards.item()),
                  "margin": (chosen_rewards - rejected_rewards).item(),
                  "chosen_logps": logps[0].item(), "rejected_logps": logps[1].item()}, tokens


def train(model, examples, args, rng, log_path, dtype=torch.float32, example_loss=pair_loss):
    """AdamW over shuffled batches of --batch-size examples, one per forward pass, gradients added up
    over a batch; a log line per step, its statistics averaged over the batch. `model` is as
    distributed.wrap returned it. baselines.py passes its own `example_loss`."""
    steps_per_epoch = (len(examples) + args.batch_size - 1) // args.batch_size
    optimizer, schedule = adamw(model, args.lr, steps_per_epoch * args.epochs, args.lr_schedule)
    device, history = next(model.parameters()).device, []
    with open(log_path if distributed.is_main() else os.devnull, "w") as log:
        for epoch in range(args.epochs):
            order = rng.sample(examples, len(examples))
            for step, batch in enumerate(chunks(order, args.batch_size), epoch * steps_per_epoch + 1):
                started, measured = time.time(), []
                for example, weight in distributed.share(batch, model):  # torchrun: this process's examples
                    with autocast(device, dtype):
                        # --- SWEET-RL: the loss of one pair, Eq. 4
                        loss, stats, tokens = example_loss(model, example, args)
                    (loss * weight / len(batch)).backward()  # the mean over the batch
                    if weight:
                        measured.append(dict(stats, loss=loss.item(), tokens=tokens))
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
                measured = distributed.gather(measured)  # torchrun: the whole batch, for the log
                record = {"step": step, "epoch": epoch + 1,
                          **{k: sum(m[k] for m in measured) / len(batch) for k in measured[0] if k != "tokens"},
                          "tokens_per_s": sum(m["tokens"] for m in measured) / (time.time() - started)}
                log.write(json.dumps(record) + "\n")
                log.flush()
                history.append(record)
                print(f"step {step}/{steps_per_epoch * args.epochs} | " + " | ".join(
                    f"{k} {v:.4g}" for k, v in record.items() if k not in ("step", "epoch")), flush=True)
    return history


# ---------------------------------------------------------------- the stage's three phases

def sample(states, args):
    """Phase 1: --candidates replies at each state, from the starting policy (here, or on --sampler)."""
    conversations = [agent_messages(t["task"], history, turn_budget(t)) for t, _, history in states]
    if args.sampler:
        return sample_from_server(args.sampler, conversations, args)
    model, tokenizer = load_model(args.model, dtype=compute_dtype(args.dtype)[0])
    prompts = [chat_text(tokenizer, messages, add_generation_prompt=True) for messages in conversations]
    candidates = sample_candidates(model, tokenizer, prompts, args.candidates, args)
    del model
    gc.collect()
    return candidates


def state_key(state):
    trajectory, turn, _ = state
    return trajectory["task_id"], trajectory["sample_idx"], turn


def earlier_candidates(path, states):
    """{state key: candidates} from the candidates.jsonl of an earlier run (--sampled); every state needed."""
    try:
        rows = [row for _, row in read_jsonl(path)]
        found = {(row["task_id"], row["sample_idx"], row["turn"]): row["candidates"] for row in rows}
    except (DataError, KeyError) as e:
        fail(f"--sampled {path}: not a candidates.jsonl of policy.py ({e})")
    missing = [key for key in map(state_key, states) if key not in found]
    if missing:
        fail(f"--sampled {path}: no candidates for {len(missing)} of the {len(states)} turn states, e.g. "
             f"task {missing[0][0]}, sample {missing[0][1]}, turn {missing[0][2]}: was it sampled from this data?")
    return found


def rank(states, candidates, critic_dir, args, rng, dtype):
    """Phase 2: each state's candidates scored by the critic (or at random), then paired: the lines of
    candidates.jsonl (each state's candidates and their scores) and of pairs.jsonl."""
    if critic_dir == RANDOM_CRITIC:
        draw = random.Random(f"random scores {args.seed}")
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
            scores = score_candidates(critic, trajectory["task"], history, turn_budget(trajectory), replies)
        scored.append(dict(zip(("task_id", "sample_idx", "turn"), state_key(state)), candidates=replies, scores=scores))
        rows += state_pairs(trajectory, turn, history, replies, scores, args.pairs_per_turn, rng)
    del critic
    gc.collect()
    return scored, rows


def save(out, model, tokenizer, history, started, data_file):
    """The trained policy as a Hugging Face checkpoint, and the closing line. (baselines.py calls it too.)"""
    weights = distributed.full_state_dict(model)  # torchrun --fsdp: every process sends its shards to the first
    if not distributed.is_main():
        return
    model.save_pretrained(out, state_dict=weights)
    tokenizer.save_pretrained(out)
    last = history[-1]
    summary = f"accuracy {last['accuracy']:.2f} | margin {last['margin']:.4g}" if "margin" in last else \
        f"nll {last['nll']:.4g}"
    print(f"done: {len(history)} steps in {time.time() - started:.0f} s | last step: loss {last['loss']:.4g} | "
          f"{summary} -> {out}/ ({data_file}, log.jsonl, checkpoint)")


def main(args):
    distributed.init()  # torchrun: join the process group; a plain run is the only process
    out = args.out or default_output(args.scored, ".policy")
    print("policy:", json.dumps(vars(args)), f"-> {out}/", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    trajectories = task_subset(trajectories_or_fail(args.scored), args.data_fraction, rng)
    states = turn_states(trajectories)
    critic_dir = args.critic or default_output(args.scored, ".critic")
    # What the phases need, checked before any model loads.
    if not states:
        fail("no agent turn follows a user turn in these trajectories: nothing to rank")
    if critic_dir != RANDOM_CRITIC and not os.path.isfile(os.path.join(critic_dir, "args.json")):
        fail(f"no critic at {critic_dir}: run `python critic.py {args.scored}` first, or pass --critic")
    if args.sampler:
        require_server("--sampler", args.sampler)
    sampled = earlier_candidates(args.sampled, states) if args.sampled else None
    dtype, why = compute_dtype(args.dtype)
    describe_dtype("policy", dtype, why)

    mine = [state for state, weight in distributed.share(states) if weight]  # torchrun: this process's states
    candidates = [sampled[state_key(state)] for state in mine] if sampled else sample(mine, args)
    scored, rows = map(distributed.gather, rank(mine, candidates, critic_dir, args, rng, dtype))  # torchrun: all
    print(f"{len(rows)} pairs from {len(states)} turn states of {len(trajectories)} trajectories")
    if not rows:
        fail("no pairs: every candidate of every state scored the same")
    os.makedirs(out, exist_ok=True)
    if distributed.is_main():
        with open(os.path.join(out, "args.json"), "w") as f:
            json.dump(vars(args), f, indent=2)
        write_jsonl(os.path.join(out, "candidates.jsonl"), scored)
        write_jsonl(os.path.join(out, "pairs.jsonl"), rows)

    # Phase 3: DPO + NLL from the starting policy, fp32 master weights (bf16 would round lr-sized updates away).
    model, tokenizer = load_model(args.model, trainable=True)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # torchrun: DDP replicas, or with --fsdp `model` itself sharded (before π_ref: FSDP then computes it as
    # training does). A plain run trains `model` itself.
    trained = distributed.wrap(model, args.fsdp, dtype)
    examples = [reply_pair_example(tokenizer, row) for row in rows]
    reference_logps(model, examples, dtype, shares_prefix(args))  # --- SWEET-RL: π_ref of Eq. 4
    started = time.time()
    # The training order has its own seed, so that every torchrun process draws the same one.
    history = train(trained, examples, args, random.Random(args.seed), os.path.join(out, "log.jsonl"), dtype)
    save(out, model, tokenizer, history, started, "pairs.jsonl")


if __name__ == "__main__":
    main(parser.parse_args())
