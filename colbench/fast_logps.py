"""Token log-probs and hidden states the fast way: the same numbers as critic.py's sequence_logps and sequence_states
(the plain way), in less time and memory. `--fast` switches it in, one line in critic.py and in policy.py;
test_all.py holds it equal to the plain way.

shared_prefix_logps  sequences that begin alike (a task's trajectories, a state's candidate replies, a
                     prompt's completions): their common beginning encoded once, its KV cache serving each
shared_prefix_states the same for a value head's hidden states
remembering          shared_prefix_logps for passes without gradients that follow one another: each continues
                     the KV cache of the beginning encoded last (encode_prefix)
TargetLogSoftmax     log_softmax(logits)[target] a few positions at a time, its gradient written out, so
                     that no fp32 copy of the [batch, seq, vocab] logits is kept for the backward pass
"""
import copy
import functools

import torch

from colbench.models import padded_batch


def shared_prefix_logps(model, sequences, scored_from, memory=None):
    """sequence_logps(model, sequences) the fast way: the sequences' common prefix is encoded once and its KV cache
    serves every sequence (gradients flow through it). The caller reads no token before index `scored_from`: those
    from it on are always scored; entries of the shared tokens before it are zeros. Sequences that share fewer than
    two tokens are encoded whole. Returns a [len - 1] tensor per sequence. `memory`: see encode_prefix."""
    shared = common_length(sequences, scored_from)
    # The last shared token goes with each row: it predicts the next one. Under two shared: each sequence whole.
    cut = max(shared - 1, 0)
    cache, input_ids, attention_mask = continuing_batch(model, sequences, cut, memory)
    logps = token_logps(model, input_ids, attention_mask, past_key_values=cache)  # column j: token cut + 1 + j
    skipped = logps.new_zeros(cut)
    return [torch.cat([skipped, row[: len(ids) - 1 - cut]]) for row, ids in zip(logps, sequences)]


def common_length(sequences, at_most):
    """How many first tokens all `sequences` share, at most `at_most`, leaving each at least one token of its own."""
    shared = min(at_most, *(len(ids) - 1 for ids in sequences))
    while any(ids[:shared] != sequences[0][:shared] for ids in sequences):
        shared -= 1  # a tokenizer may merge across the boundary: share only identical tokens
    return shared


def continuing_batch(model, sequences, cut, memory=None):
    """(KV cache, input_ids, attention_mask): the first `cut` tokens, which all `sequences` share, encoded once
    (encode_prefix, `memory` as there) and the cache repeated for each row; the rows, the tokens from `cut` on,
    right-padded after the cached ones. With `cut` 0: no cache, each sequence whole."""
    cache = None
    if cut:
        cache = encode_prefix(model, sequences[0][:cut], memory)
        cache.batch_repeat_interleave(len(sequences))
    input_ids, attention_mask = padded_batch([ids[cut:] for ids in sequences], next(model.parameters()).device,
                                             cached=cut)
    return cache, input_ids, attention_mask


def shared_prefix_states(model, sequences, read_from):
    """critic.py's sequence_states the fast way (a value head's turns: a task's trajectories, a state's candidate
    replies): the last hidden states, [len, hidden] per sequence in fp32, their common prefix encoded once and its KV
    cache serving every sequence (gradients flow through it). The caller reads no state before index `read_from`:
    those of the shared tokens before it are zeros."""
    shared = common_length(sequences, read_from)
    cache, input_ids, attention_mask = continuing_batch(model, sequences, shared)
    states = model.base_model(input_ids=input_ids, attention_mask=attention_mask, cache=cache).last_hidden_state
    skipped = states.new_zeros(shared, states.shape[-1])
    return [torch.cat([skipped, row[: len(ids) - shared]]).float() for row, ids in zip(states, sequences)]


def remembering():
    """shared_prefix_logps for passes without gradients that follow one another, with a model whose weights stay as
    they are (π_ref, a trained critic scoring): with a memory of its own, of the prefix each model encoded last, so
    that the next turn state of a dialogue encodes only what the turn added."""
    return functools.partial(shared_prefix_logps, memory={})


def encode_prefix(model, prefix, memory=None):
    """The KV cache of the id list `prefix`. Its own logits are never used: logits_to_keep=1 spares its LM head.
    `memory`, a dict the caller keeps (no gradients: scoring only), holds for each model the prefix it encoded last
    and its cache; a prefix that extends it continues that cache. The memory then holds this prefix, and the
    caller gets a copy of its cache to grow."""
    device = next(model.parameters()).device
    remembered = {} if memory is None else memory.setdefault(model, {})
    cache, start = None, 0
    if remembered and prefix[:len(remembered["ids"])] == remembered["ids"]:
        cache, start = remembered["cache"], len(remembered["ids"])
    if start < len(prefix):
        cache = model(input_ids=torch.tensor([prefix[start:]], device=device), cache=cache, use_cache=True,
                      logits_to_keep=1).cache
    if memory is None:
        return cache
    remembered.update(ids=list(prefix), cache=cache)
    return copy.deepcopy(cache)


def token_logps(model, input_ids, attention_mask, past_key_values=None):
    """log p(token_i | tokens_<i) for i >= 1: [batch, seq] ids -> [batch, seq - 1] log-probs.

    With `past_key_values`, `input_ids` continues a cached prefix and the log-probs start at its
    second token (the first one's prediction belongs to the prefix's last logits)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, cache=past_key_values).logits
    return TargetLogSoftmax.apply(logits[:, :-1], input_ids[:, 1:])


class TargetLogSoftmax(torch.autograd.Function):
    """log_softmax(logits)[target] in fp32, a few positions at a time, with the gradient written out.

    The same numbers as `logits.float().log_softmax(-1).gather(-1, targets)`, in less memory: that
    formula keeps an fp32 copy of the [batch, seq, vocab] logits for the backward pass and makes
    several more in it (about 1.5 GB at 2 x 1024 tokens of SmolLM2's 49k vocabulary). This keeps only
    the logits as they came (bf16 under autocast) and recomputes the softmax chunk by chunk."""

    @staticmethod
    def pieces(length, positions=128):  # 2 x 128 positions x 49152 fp32 logits: 50 MB a piece
        return [slice(i, i + positions) for i in range(0, length, positions)]

    @staticmethod
    def forward(ctx, logits, targets):  # [batch, seq, vocab], [batch, seq] -> [batch, seq]
        logps = torch.empty(targets.shape, dtype=torch.float32, device=logits.device)
        for cut in TargetLogSoftmax.pieces(logits.shape[1]):
            piece = logits[:, cut].float()
            logps[:, cut] = piece.gather(-1, targets[:, cut].unsqueeze(-1)).squeeze(-1) - piece.logsumexp(-1)
        ctx.save_for_backward(logits, targets)
        return logps

    @staticmethod
    def backward(ctx, grad):  # d log p(target) / d logits = one_hot(target) - softmax(logits)
        logits, targets = ctx.saved_tensors
        grad_logits = torch.empty_like(logits)
        for cut in TargetLogSoftmax.pieces(logits.shape[1]):
            g = grad[:, cut].unsqueeze(-1)
            piece = logits[:, cut].float().softmax(-1).mul_(-g)
            grad_logits[:, cut] = piece.scatter_add_(-1, targets[:, cut].unsqueeze(-1), g)
        return grad_logits, None
