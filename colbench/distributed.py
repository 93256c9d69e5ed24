"""torchrun support in one place: which process this is, and the few collective steps the stages take.

    torchrun --nproc_per_node=N critic.py SCORED.jsonl          # N processes: gloo on CPU, nccl on CUDA
    torchrun --nproc_per_node=N critic.py SCORED.jsonl --fsdp   # parameters sharded across them (FSDP2)

A plain `python critic.py ...` is rank 0 of 1: nothing here then communicates (gather still moves
tensors to the CPU).
"""
import contextlib
import math
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel


def init():
    """(rank, world_size). Under torchrun, joins the process group; ranks other than 0 stay silent."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if rank > 0:  # only rank 0 prints progress and summaries
        sys.stdout = open(os.devnull, "w")
        os.environ["TQDM_DISABLE"] = "1"
    return rank, world


def to_cpu(value):
    """Tensors, also inside tuples, lists and dicts, moved to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(to_cpu(item) for item in value)
    if isinstance(value, dict):
        return {name: to_cpu(item) for name, item in value.items()}
    return value


def gather(items):
    """This rank's list -> the lists of all ranks concatenated in rank order (the same on every rank).
    Tensors come back on the CPU, with one process too: all_gather_object would hand each rank the
    other ranks' tensors on the GPUs that made them. Callers move them to their device at use."""
    items = [to_cpu(item) for item in items]
    if not dist.is_initialized():
        return items
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, items)
    return [item for part in parts for item in part]


def wrap(model, fsdp=False, dtype=torch.float32):
    """The model to train under torchrun. DistributedDataParallel: a whole replica on each rank,
    gradients averaged. With `fsdp`, FSDP2 in place: each decoder layer, then the rest, sharded across
    the ranks (parameters, gradients and AdamW states: 1/N each) and gathered one layer at a time for
    the forward and the backward pass; with a bf16 `dtype` a layer is gathered in bf16 and gradients
    are averaged in fp32, the shards staying fp32. Create the optimizer afterwards: FSDP replaces the
    parameters."""
    if not dist.is_initialized():
        return model
    if not fsdp:
        return DistributedDataParallel(model)
    if dtype == torch.bfloat16:
        precision = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        precision = MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=precision)
    # The root frees its gathered weights after each forward too (FSDP's default keeps them for the backward):
    # else, after an evaluation pass, model.parameters() are the gathered weights, not the shards the optimizer needs.
    return fully_shard(model, mp_policy=precision, reshard_after_forward=True)


def sync_on_last(model, i, count):
    """Accumulating gradients over `count` backward passes: DDP communicates only on the last one.
    FSDP reduce-scatters after each: skipping that would keep the whole model's gradients on every rank."""
    if isinstance(model, DistributedDataParallel) and i < count - 1:
        return model.no_sync()
    return contextlib.nullcontext()


def shard(items, rank, world):
    """This rank's share of `items`, padded so every rank runs the same number of passes (DDP's
    backward and every FSDP forward need all ranks): [(item, weight)], weight 0 for the padding."""
    mine = [(item, 1.0) for item in items[rank::world]]
    rounds = math.ceil(len(items) / world)  # passes per rank
    return mine + [(items[0], 0.0)] * (rounds - len(mine))


def full_state_dict(model):
    """The whole model's weights for save_pretrained. FSDP: every rank must call this (it gathers the
    shards); rank 0 gets them on the CPU, the others an empty dict."""
    if isinstance(model, FSDPModule):
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return model.state_dict()
