"""The paper's baselines beside SWEET-RL, and the demo's warm start: training on whole trajectories.

    python -m harness.baselines runs/backend_train.scored.jsonl --method mt-dpo   # -> runs/backend_train.mt-dpo/
    python -m harness.baselines runs/backend_train.scored.jsonl --method rft      # -> runs/backend_train.rft/

mt-dpo, Multi-Turn DPO: two trajectories of one task paired by reward (the critic's pairing rule,
critic.py preference_pairs), their log-probs summed over all agent turns, trained with policy.py's loss
(Eq. 4: DPO plus λ·NLL of the chosen one) on whole dialogues instead of replies. rft, Rejection Fine-Tuning: the NLL of the
agent turns of the successful trajectories. sft: the same on every trajectory, scored or not (the demo's
warm start on scripted dialogues, harness/warmstart.py). The agent turns are scored under the prompt the
agent saw, with the turn budget each trajectory records. Writes the folder once whole: pairs.jsonl
(mt-dpo, TRL's preference format) or sft.jsonl (TRL's prompt-completion format), args.json, log.jsonl and
the checkpoint, which `rollout.py --agent` runs.
"""
import argparse
import json
import math
import os
import random
import time

import torch

from colbench import distributed
from colbench.cli import (fail, fraction, non_negative_float, non_negative_int, positive_float, positive_int,
                          trajectories_or_fail)
from colbench.data import default_output, finish_folder, partial_folder, succeeded, task_subset, write_jsonl
from colbench.env import agent_messages, turn_budget
from colbench.models import (DTYPES, SCHEDULES, adamw, autocast, compute_dtype, describe_dtype, load_model,
                             plain_messages)
from colbench.fast_logps import remembering, shared_prefix_logps
from critic import PAIRINGS, preference_pairs, sequence_logps
from policy import (completion_logps, dpo_nll_loss, frozen_pair_logps, log_step, shuffled_batches,
                    tokenize_completion)
from policy import parser as policy_parser

METHODS = ("mt-dpo", "rft", "sft")

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="trajectories JSONL: scored (evaluate.py's output) for mt-dpo and rft")
parser.add_argument("--method", required=True, choices=METHODS, help="Multi-Turn DPO, RFT, or sft (every trajectory)")
parser.add_argument("--out", help="policy folder to write (default runs/<stem>.<method>)")
parser.add_argument("--model", default="embedded", help="policy to start from: model folder, hub id, or 'embedded'")
parser.add_argument("--data-fraction", type=fraction, default=1.0,
                    help="use the trajectories of this random fraction of the tasks, whole (mt-dpo pairs within one)")
parser.add_argument("--min-reward-gap", type=non_negative_float, default=0.0,
                    help="mt-dpo: paired rewards differ by at least this (0: any difference)")
parser.add_argument("--pairing", default="all", choices=PAIRINGS,
                    help="mt-dpo: which trajectories of a task make pairs, as critic.py --pairing")
parser.add_argument("--beta", type=positive_float, default=0.1, help="mt-dpo: DPO temperature β'")
parser.add_argument("--nll-coef", type=non_negative_float, default=1.0, help="mt-dpo: weight λ of the NLL term")
parser.add_argument("--lr", type=positive_float, default=1e-5, help="AdamW learning rate (the warm start: 1e-4)")
parser.add_argument("--epochs", type=positive_int, default=1, help="passes over the pairs (rft, sft: trajectories)")
parser.add_argument("--batch-size", type=positive_int, default=8, help="examples per optimizer step")
parser.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                    help="constant, or cosine: the official code's (3%% warm-up, cosine decay to 0.1x the LR)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="training forward passes; auto: bf16 where the hardware computes it natively")
parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for subsetting and shuffling")
scale = parser.add_argument_group("scale (docs/SCALING.md)")
scale.add_argument("--fast", action="store_true", help="the fast log-probs, same numbers (colbench/fast_logps.py)")
scale.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass to save memory")
scale.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW states across the processes (FSDP2)")


# ---------------------------------------------------------------- the data: whole trajectories

def trajectory_prompt_completion(trajectory):
    """The agent's first prompt (system + problem), and the rest of the dialogue as the completion."""
    dialogue = plain_messages(trajectory["dialogue_history"])
    return agent_messages(trajectory["task"], dialogue[:1], turn_budget(trajectory)), dialogue[1:]


def mt_dpo_pairs(trajectories, min_reward_gap, pairing):
    """Multi-Turn DPO's pairs: whole trajectories of a task paired by reward, as rows in TRL's format."""
    rows = []
    for chosen, rejected in preference_pairs(trajectories, min_reward_gap, pairing):
        prompt, chosen_completion = trajectory_prompt_completion(chosen)
        _, rejected_completion = trajectory_prompt_completion(rejected)
        rows.append({"task_id": chosen["task_id"], "chosen_sample_idx": chosen["sample_idx"],
                     "rejected_sample_idx": rejected["sample_idx"], "prompt": prompt,
                     "chosen": chosen_completion, "rejected": rejected_completion,
                     "chosen_score": chosen["reward"], "rejected_score": rejected["reward"]})
    return rows


def sft_rows(trajectories, method):
    """The agent turns of each trajectory as a completion (rft: of the successful ones only)."""
    return [{"task_id": t["task_id"], "sample_idx": t["sample_idx"],
             **dict(zip(("prompt", "completion"), trajectory_prompt_completion(t)))}
            for t in trajectories if method == "sft" or succeeded(t)]


def trajectory_sequence(tokenizer, trajectory):
    """(ids, spans): the whole dialogue as one sequence under the prompt the agent saw (the same at every
    turn), the spans of its agent turns scored."""
    return tokenize_completion(tokenizer, *trajectory_prompt_completion(trajectory))


# ---------------------------------------------------------------- the losses, and the loop they train in

def mt_dpo_loss(beta, nll_coef, logps_fn):
    """Multi-Turn DPO's `loss_of(model, index, pair)`: policy.py's Eq. 4 on a pair of whole trajectories,
    their log-probs (by `logps_fn`) summed over all agent turns, against π_ref's (`reference`, [pairs, 2])."""
    def loss_of(model, reference, index, pair):
        logps, counts = completion_logps(model, [pair["chosen"], pair["rejected"]], logps_fn)  # [2] each
        ref = reference[index].to(logps.device)  # [2]: chosen, rejected
        losses, chosen, rejected = dpo_nll_loss(logps[:1], logps[1:], ref[:1], ref[1:], counts[:1], beta, nll_coef)
        return losses.mean(), {"accuracy": float(chosen.item() > rejected.item()), "margin": (chosen - rejected).item(),
                               "chosen_logps": logps[0].item(), "rejected_logps": logps[1].item()}, counts.sum().item()
    return loss_of


def nll_loss(logps_fn):
    """rft and sft: the NLL of a trajectory's agent turns, a mean over their tokens (log-probs by `logps_fn`)."""
    def loss_of(model, reference, index, example):
        logps, counts = completion_logps(model, [example["completion"]], logps_fn)
        nll = -logps.sum() / counts.sum()
        return nll, {"nll": nll.item()}, counts.sum().item()
    return loss_of


def train_on_batch(model, optimizer, schedule, batch, examples, reference, loss_of, autocast_dtype):
    """One optimizer step on a batch of example indices, one example per forward pass, their gradients
    added up: `loss_of(model, reference, index, example)` -> (loss, statistics, tokens). Returns this
    process's statistics."""
    measured, device = [], next(model.parameters()).device
    examples_per_process = distributed.per_process(len(batch))  # torchrun: DDP and FSDP average over N processes
    for index in distributed.share(batch, model):  # torchrun: this process's examples, the passes kept in step
        with autocast(device, autocast_dtype):
            loss, statistics, tokens = loss_of(model, reference, index, examples[index])
        (loss / examples_per_process).backward()  # gradients add up to the batch mean's
        measured.append(dict(statistics, loss=loss.item(), tokens=tokens))
    torch.nn.utils.clip_grad_norm_(model.parameters(), policy_parser.get_default("max_grad_norm"))
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
    return measured


def train(model, examples, reference, loss_of, rng, log_path, autocast_dtype, epochs, batch_size, lr, lr_schedule):
    """policy.py's loop with another loss: AdamW over shuffled batches of `batch_size` examples, a log
    line per step. `model` is as distributed.wrap returned it; log_path None: no log (a torchrun
    process but the first)."""
    steps = math.ceil(len(examples) / batch_size) * epochs
    optimizer, schedule = adamw(model, lr, steps, lr_schedule)  # betas and weight decay: policy.py's defaults
    records = []
    with open(log_path or os.devnull, "w") as log:
        # Each example on its own in the shuffle: with a task's dialogues side by side (as policy.py keeps a
        # turn state's pairs), the warm start passed 20% of the validation dialogues, not 61% (docs/RESULTS.md).
        for number, epoch, batch in shuffled_batches([[i] for i in range(len(examples))], batch_size, epochs, rng):
            started = time.time()
            measured = train_on_batch(model, optimizer, schedule, batch, examples, reference, loss_of, autocast_dtype)
            records.append(log_step(log, number, epoch, steps, measured, len(batch), started))
    return records


def main(args):
    if args.fast and (args.fsdp or args.gradient_checkpointing):  # neither backpropagates into a shared KV cache
        parser.error("--fast cannot be used with --fsdp or --gradient-checkpointing")
    distributed.init()  # torchrun: join the process group; a plain run is the only process
    out = args.out or default_output(args.scored, "." + args.method)
    print(f"baselines ({args.method}):", json.dumps(vars(args)), f"-> {out}/", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    trajectories = trajectories_or_fail(args.scored, rewards_for=None if args.method == "sft" else args.method)
    trajectories = task_subset(trajectories, args.data_fraction, random.Random(args.seed))
    if args.method == "mt-dpo":
        rows = mt_dpo_pairs(trajectories, args.min_reward_gap, args.pairing)
        print(f"{len(rows)} trajectory pairs from {len(trajectories)} trajectories")
        if not rows:
            fail(f"no pairs: no two trajectories of a task differ in reward by at least {args.min_reward_gap} "
                 f"under --pairing {args.pairing}")
    else:
        rows = sft_rows(trajectories, args.method)
        print(f"{len(rows)} {'successful ' if args.method == 'rft' else ''}trajectories of {len(trajectories)} "
              "to fine-tune on")
        if not rows:
            fail("no successful trajectory to fine-tune on" if args.method == "rft" else "no trajectory to train on")
    autocast_dtype, why = compute_dtype(args.dtype)
    describe_dtype(args.method, autocast_dtype, why)
    data_file = "pairs.jsonl" if args.method == "mt-dpo" else "sft.jsonl"
    folder = partial_folder(out) if distributed.is_main() else None  # renamed to `out` once whole
    if folder:
        with open(os.path.join(folder, "args.json"), "w") as f:
            json.dump(vars(args), f, indent=2)
        write_jsonl(os.path.join(folder, data_file), rows)

    model, tokenizer = load_model(args.model, trainable=True, keep_freed=args.fast)  # fp32 master weights
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    trained = distributed.wrap(model, args.fsdp, autocast_dtype)  # torchrun: DDP replicas or FSDP2 shards; else `model`
    logps_fn = shared_prefix_logps if args.fast else sequence_logps  # --fast: the named fast path
    by_key = {(t["task_id"], t["sample_idx"]): t for t in trajectories}
    started = time.time()
    if args.method == "mt-dpo":  # each side: its trajectory's agent turns, under the prompt the agent saw
        examples = [{side: trajectory_sequence(tokenizer, by_key[row["task_id"], row[f"{side}_sample_idx"]])
                     for side in ("chosen", "rejected")} for row in rows]
        reference = frozen_pair_logps(model, examples, autocast_dtype, remembering() if args.fast else logps_fn,
                                      policy_parser.get_default("pairs_per_pass"))  # π_ref: the policy before training
        loss_of = mt_dpo_loss(args.beta, args.nll_coef, logps_fn)
    else:
        examples = [{"completion": trajectory_sequence(tokenizer, by_key[row["task_id"], row["sample_idx"]])}
                    for row in rows]
        reference, loss_of = None, nll_loss(logps_fn)
    records = train(trained, examples, reference, loss_of, random.Random(args.seed),
                    folder and os.path.join(folder, "log.jsonl"), autocast_dtype, args.epochs, args.batch_size, args.lr,
                    args.lr_schedule)
    if distributed.save_checkpoint(folder, model, tokenizer):  # torchrun: only the first process writes
        finish_folder(folder, out)
        last = records[-1]
        summary = f"accuracy {last['accuracy']:.2f} | margin {last['margin']:.4g}" if "margin" in last else \
            f"nll {last['nll']:.4g}"
        print(f"done: {len(records)} steps in {time.time() - started:.0f} s | last step: loss {last['loss']:.4g} | "
              f"{summary} -> {out}/ ({data_file}, log.jsonl, checkpoint)")


if __name__ == "__main__":
    main(parser.parse_args())
