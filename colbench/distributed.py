"""torchrun support in one place: which process this is, and the few collective steps the stages take.

    torchrun --nproc_per_node=N critic.py SCORED.jsonl      # N processes: gloo on CPU, nccl on CUDA

A plain `python critic.py ...` is rank 0 of 1: nothing here then communicates (gather still moves
tensors to the CPU).
"""
import contextlib
import os
import sys

import torch
import torch.distributed as dist
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


def wrap(model):
    """DistributedDataParallel around the model under torchrun: gradients averaged across ranks."""
    return DistributedDataParallel(model) if dist.is_initialized() else model


def sync_on_last(model, i, count):
    """Accumulating gradients over `count` backward passes: DDP communicates only on the last one."""
    return model.no_sync() if dist.is_initialized() and i < count - 1 else contextlib.nullcontext()


def shard(items, rank, world):
    """This rank's share of one global batch, padded so every rank runs the same number of backward
    passes (DDP needs that): [(item, weight)], weight 0 for the padding."""
    mine = [(item, 1.0) for item in items[rank::world]]
    rounds = -(-len(items) // world)
    return mine + [(items[0], 0.0)] * (rounds - len(mine))
