"""What the trainers share that is not the algorithm: policy.py and colbench/baselines.py train on
completions (the replies or agent turns after a prompt), critic.py saves a checkpoint as they do.

tokenize_completion  a prompt and its completion as token ids, the completion's agent turns located
completion_logps     the completion tokens' summed log-probs, the plain way or with the prompt shared
prompt_groups        the pairs that begin with the same prompt, a few at a time: one forward pass each
reference_logps      π_ref of a pair's two sides, computed once before training and kept in the pair
shuffled_batches     the groups of each epoch in a new random order, cut into batches of examples
log_step             the log line of an optimizer step: log.jsonl and the terminal
save_checkpoint      the whole model (gathered from every torchrun process), saved by the first process
"""
import json
import math
import time

import torch
from tqdm import tqdm

from colbench import distributed
from colbench.fast_logps import shared_prefix_logps
from colbench.models import autocast, sequence_logps, tokenize_turns


def tokenize_completion(tokenizer, prompt, completion):
    """(ids, spans) of prompt + completion: the token ids, and the [start, end) spans of the completion's
    assistant messages only."""
    ids, spans = tokenize_turns(tokenizer, prompt + completion)
    return ids, spans[len(spans) - sum(m["role"] == "assistant" for m in completion):]


def completion_logps(model, sequences, share_prompt=True, memory=None):
    """Summed log-probs of the completion tokens (the spans) of (ids, spans) sequences, their token counts,
    and the tokens processed: [n], [n], int. The plain way: each sequence encoded whole
    (models.sequence_logps). The fast way (share_prompt): the tokens all sequences begin with (the prompt)
    encoded once, its KV cache serving each (fast_logps.shared_prefix_logps; gradients flow through it;
    `memory` without gradients only: fast_logps.encode_prefix)."""
    ids_list = [ids for ids, _ in sequences]
    if not share_prompt:
        logps, shared = sequence_logps(model, ids_list), 1  # nothing shared: every token encoded in its row
    else:
        logps, shared = shared_prefix_logps(model, ids_list, min(spans[0][0] for _, spans in sequences), memory)
    # Entry i - 1 of a row is token i's log-prob: a span [start, end) is entries start - 1 to end - 1.
    sums = torch.stack([sum(row[start - 1:end - 1].sum() for start, end in spans)
                        for row, (_, spans) in zip(logps, sequences)])
    counts = torch.tensor([float(sum(end - start for start, end in spans)) for _, spans in sequences],
                          device=sums.device)
    tokens = shared - 1 + sum(len(ids) - shared + 1 for ids in ids_list)  # the prefix once, then each continuation
    return sums, counts, tokens


PER_PASS = 4  # pairs in one forward pass at most: memory stays small


def pair_prompt(pair):
    """The prompt ids both sides of a pair begin with (`chosen` and `rejected` follow the same prompt)."""
    ids, spans = pair["chosen"]
    return tuple(ids[:spans[0][0]])


def prompt_groups(pairs, share_prompt=True, prompt=pair_prompt):
    """The pairs that begin with the same `prompt(pair)` (a turn state's; Multi-Turn DPO's of a task), in
    the order of their first, PER_PASS at most a group: each group is one forward pass, its prompt encoded
    once (completion_logps). Without share_prompt, one pair a group."""
    if not share_prompt:
        return [[pair] for pair in pairs]
    by_prompt = {}
    for pair in pairs:
        by_prompt.setdefault(prompt(pair), []).append(pair)
    return [same[i:i + PER_PASS] for same in by_prompt.values() for i in range(0, len(same), PER_PASS)]


@torch.no_grad()
def reference_logps(model, pairs, dtype=torch.float32, share_prompt=True):
    """π_ref of a DPO loss (Eq. 4) is the model before training: the summed log-probs of each pair's
    `chosen` and `rejected` completion, computed once, the way training computes the model's up to float
    rounding (the pairs of one prompt together), and kept in the pair as `reference_logps` ([2]: chosen,
    rejected)."""
    model.eval()
    groups = prompt_groups(range(len(pairs)), share_prompt, lambda i: pair_prompt(pairs[i]))
    mine, memory = [], {}  # a dialogue's next turn state continues the cache of the one before
    for group, weight in tqdm(list(distributed.share(groups)), desc="π_ref log-probs", unit="prompt"):
        with autocast(model.device, dtype):
            sides = [pairs[i][side] for i in group for side in ("chosen", "rejected")]
            logps, _, _ = completion_logps(model, sides, share_prompt, memory)  # [2 * pairs]
        if weight:  # torchrun: weight 0 marks a padding pass
            mine += [(i, logps[2 * k:2 * k + 2]) for k, i in enumerate(group)]
    for i, logps in distributed.gather(mine):  # torchrun: every process gets every pair's
        pairs[i]["reference_logps"] = logps
    model.train()


def shuffled_batches(groups, batch_size, epochs, rng):
    """(step, epoch, batch) of each optimizer step, both counted from 1: in every epoch the `groups` of
    examples (prompt_groups) in a new random order from `rng`, each group's examples side by side, cut into
    batches of `batch_size` examples (the last one may be smaller; a group may straddle two batches)."""
    examples = sum(len(group) for group in groups)
    steps_per_epoch = math.ceil(examples / batch_size)
    for epoch in range(epochs):
        order = [example for group in rng.sample(groups, len(groups)) for example in group]
        for number in range(steps_per_epoch):
            yield epoch * steps_per_epoch + number + 1, epoch + 1, order[number * batch_size:(number + 1) * batch_size]


def log_step(log, step, epoch, steps, measured, batch_size, started):
    """The log record of an optimizer step, written to `log` and printed: the statistics of each example
    (`measured`, gathered from every torchrun process) averaged over the batch, and the tokens per second
    since `started`."""
    measured = distributed.gather(measured)
    record = {"step": step, "epoch": epoch,
              **{k: sum(m[k] for m in measured) / batch_size for k in measured[0] if k != "tokens"},
              "tokens_per_s": sum(m["tokens"] for m in measured) / (time.time() - started)}
    log.write(json.dumps(record) + "\n")
    log.flush()
    print(f"step {step}/{steps} | " + " | ".join(
        f"{k} {v:.4g}" for k, v in record.items() if k not in ("step", "epoch")), flush=True)
    return record


def save_checkpoint(folder, model, tokenizer):
    """The whole model and its tokenizer saved into `folder` as a Hugging Face checkpoint. Every torchrun
    process calls this (under FSDP each sends its shards); only the first writes, and gets True."""
    weights = distributed.full_state_dict(model)
    if not distributed.is_main():
        return False
    model.save_pretrained(folder, state_dict=weights)
    tokenizer.save_pretrained(folder)
    return True
