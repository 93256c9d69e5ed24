"""Sampling the fast way: the same tokens as models.sample_plain (transformers' `model.generate`), in less time.

sample_shrinking_batch  a shared beginning encoded once, each distinct prompt once, and a finished reply
                        leaving the batch; test_all.py holds its greedy tokens equal to sample_plain's
prefill_by_length       the distinct prompts encoded a few of like length at a time, not all padded to the longest
ReservedLayer           a KV-cache layer that writes each step's keys and values into room reserved for
                        them, instead of transformers' torch.cat of the whole cache
keep_freed_memory       freed memory kept in the process for the next large block (load_model sets it under --fast)
"""
import copy
import ctypes

import torch
from transformers.cache_utils import DynamicLayer


def keep_freed_memory(keep=True):
    """glibc gives every freed block over 32 MB (logits, KV caches) back to the system and maps the next
    one anew, each of its pages faulted in and zeroed (harness/bench.py keep_freed_memory: sampling 1.2x faster
    without that). With keep, freed memory stays in the process for the next block (mallopt: M_MMAP_MAX
    0, M_TRIM_THRESHOLD 2 GiB); the peak grows a little (+0.1 GB for critic_peak_gb). keep=False restores
    glibc's defaults. No effect where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):  # macOS, Windows: no mallopt
        return
    mallopt(-4, 0 if keep else 65536)  # M_MMAP_MAX: how many blocks may have their own mapping
    mallopt(-1, 2**31 - 1 if keep else 128 * 1024)  # M_TRIM_THRESHOLD: free bytes kept at the heap's top


@torch.no_grad()
def sample_shrinking_batch(model, prompt_ids, max_new_tokens, temperature, end_ids, in_place=True,
                           prefill_tokens=4096):
    """sample_plain's rows, the fast way, for prompts given as id lists. The prompts' common beginning
    (a system prompt) is encoded once, and each distinct prompt once (policy.py samples n replies to
    each), a few of like length at a time (prefill_by_length: at most `prefill_tokens` padded tokens a pass;
    None, all in one pass); their KV cache is then copied to every row. In the sampling loop a row that ends its reply
    leaves the batch, its cached keys and values with it, so only unfinished replies cost compute; each
    step writes its keys and values into room reserved for them (ReservedLayer; in_place=False appends
    them with torch.cat, as transformers does, for harness/bench.py to compare).
    Greedy decoding gives sample_plain's tokens (up to float rounding); sampling draws from the same
    distribution with its own random stream. The model's generation_config is not read."""
    device = next(model.parameters()).device
    stop = torch.tensor(end_ids, device=device)  # the ids that end a reply
    index = {}  # each distinct prompt -> its row in the prefill
    for ids in prompt_ids:
        index.setdefault(tuple(ids), len(index))
    distinct = list(index)
    row_prompt = torch.tensor([index[tuple(ids)] for ids in prompt_ids], device=device)
    # The beginning every distinct prompt shares, encoded once; each keeps one token of its own at least.
    shared = min(len(ids) for ids in distinct) - 1
    while any(ids[:shared] != distinct[0][:shared] for ids in distinct):
        shared -= 1
    prefix = None
    if shared:
        prefix = model(input_ids=torch.tensor([distinct[0][:shared]], device=device), use_cache=True,
                       logits_to_keep=1).cache
    # The rest of each distinct prompt, left-padded after the shared beginning; positions count real tokens.
    rests = [list(ids[shared:]) for ids in distinct]
    _, attention_mask, positions = left_padded(rests, shared, device)
    one_pass = len(rests) * max(len(rest) for rest in rests)  # padded tokens of all in one pass
    cache, logits = prefill_by_length(model, rests, prefix, shared, prefill_tokens or one_pass)
    # Every row starts from its prompt's cache.
    if in_place:
        cache.layers = [ReservedLayer(layer, max_new_tokens) for layer in cache.layers]
    cache.batch_select_indices(row_prompt)
    logits = logits[row_prompt].float()
    attention_mask, positions = attention_mask[row_prompt], positions[row_prompt, -1:]
    rows = [[] for _ in prompt_ids]
    live = list(range(len(prompt_ids)))  # the prompt each batch row belongs to
    for step in range(max_new_tokens):
        if temperature > 0:
            next_tokens = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1).squeeze(-1)
        else:
            next_tokens = logits.argmax(dim=-1)
        for prompt, token in zip(live, next_tokens.tolist()):
            rows[prompt].append(token)
        going = ~torch.isin(next_tokens, stop)
        if not going.all():
            keep = going.nonzero().squeeze(-1)
            if len(keep) == 0:
                break
            cache.batch_select_indices(keep)
            live = [live[i] for i in keep.tolist()]
            next_tokens, attention_mask, positions = next_tokens[keep], attention_mask[keep], positions[keep]
        if step == max_new_tokens - 1:
            break
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(live), 1)], dim=-1)
        positions = positions + 1
        output = model(input_ids=next_tokens.unsqueeze(-1), attention_mask=attention_mask, position_ids=positions,
                       cache=cache, use_cache=True)
        cache, logits = output.cache, output.logits[:, -1].float()
    return rows


def prefill_by_length(model, rests, prefix, shared, prefill_tokens):
    """The KV cache and last logits of `rests`, id lists that continue `shared` tokens whose cache is `prefix`
    (None when shared is 0), as one pass over them all, left-padded to the longest, gives them: keys and values
    [len(rests), heads, shared + longest, width] per layer, each row's on the right; logits [len(rests), vocab].
    They go through a few of like length at a time (sorted by length, at most `prefill_tokens` padded tokens a
    pass), so that a short prompt is not padded to the longest: half of a frontend rollout's prefill was padding.
    A row's numbers do not depend on its padding (test_all.py holds sampling to model.generate's tokens)."""
    device = next(model.parameters()).device
    order = sorted(range(len(rests)), key=lambda i: len(rests[i]))
    passes = [[]]
    for i in order:  # lengths grow along `order`: a pass's last row is its longest
        if passes[-1] and (len(passes[-1]) + 1) * len(rests[i]) > prefill_tokens:
            passes.append([])
        passes[-1].append(i)
    done, logits = [], [None] * len(rests)
    for rows in passes:
        width = len(rests[rows[-1]])
        input_ids, attention_mask, positions = left_padded([rests[i] for i in rows], shared, device)
        cache = None
        if prefix is not None:
            cache = copy.deepcopy(prefix)
            cache.batch_repeat_interleave(len(rows))
        output = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, cache=cache,
                       use_cache=True, logits_to_keep=1)
        done.append((rows, width, output.cache))
        for i, row_logits in zip(rows, output.logits[:, -1]):
            logits[i] = row_logits
    # One cache, the prompts' rows in their order, each left-padded with zeros (masked) to the longest.
    longest, cache = len(rests[order[-1]]), done[-1][2]  # the last pass's cache object, its states replaced
    where = torch.tensor([i for rows, _, _ in done for i in rows], device=device).argsort()
    for n, layer in enumerate(cache.layers):
        for name in ("keys", "values"):
            parts = []
            for rows, width, pass_cache in done:
                states = getattr(pass_cache.layers[n], name)  # [rows, heads, shared + width, size]
                padding = states.new_zeros(*states.shape[:2], longest - width, states.shape[-1])
                parts.append(torch.cat([states[:, :, :shared], padding, states[:, :, shared:]], dim=2))
            setattr(layer, name, torch.cat(parts)[where])
    return cache, torch.stack(logits)


def left_padded(rests, shared, device):
    """(input ids, attention mask, positions) of id lists `rests` that continue `shared` cached tokens, each
    left-padded to the longest; positions count real tokens."""
    longest = max(len(rest) for rest in rests)
    input_ids = torch.tensor([[0] * (longest - len(rest)) + rest for rest in rests], device=device)
    rest_mask = torch.tensor([[0] * (longest - len(rest)) + [1] * len(rest) for rest in rests], device=device)
    attention_mask = torch.cat([rest_mask.new_ones(len(rests), shared), rest_mask], dim=-1)
    return input_ids, attention_mask, shared + (rest_mask.cumsum(-1) - 1).clamp(min=0)


class ReservedLayer(DynamicLayer):
    """One layer of a KV cache with room reserved for `room` more positions: a decoding step writes its
    keys and values in place. transformers' DynamicLayer appends them with torch.cat, copying the whole
    cache at every step (20 of 75 s in a profile of the demo's 210-dialogue test rollout)."""

    def __init__(self, layer, room):
        super().__init__()
        self.dtype, self.device, self.is_initialized = layer.keys.dtype, layer.keys.device, True
        self.length = layer.keys.shape[-2]
        batch, heads, _, width = layer.keys.shape
        self.buffers = [layer.keys.new_empty(batch, heads, self.length + room, width) for _ in range(2)]
        for buffer, states in zip(self.buffers, (layer.keys, layer.values)):
            buffer[:, :, :self.length] = states
        self.show_filled()

    def show_filled(self):
        """keys and values, as transformers reads them: the filled part of the buffers."""
        self.keys, self.values = (buffer[:, :, :self.length] for buffer in self.buffers)

    def update(self, key_states, value_states, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        for buffer, states in zip(self.buffers, (key_states, value_states)):
            buffer[:, :, self.length:end] = states
        self.length = end
        self.show_filled()
        return self.keys, self.values

    def batch_select_indices(self, indices):
        self.buffers = [buffer[indices] for buffer in self.buffers]
        self.show_filled()
