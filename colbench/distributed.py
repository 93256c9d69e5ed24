"""torchrun in one place, so that the stages read as one process and scale with a few marked lines.

    torchrun --nproc_per_node=N critic.py SCORED.jsonl          # N processes: gloo on CPU, nccl on CUDA
    torchrun --nproc_per_node=N critic.py SCORED.jsonl --fsdp   # parameters sharded across them (FSDP2)

A plain `python critic.py ...` is process 0 of 1: `share` then yields every item, `per_process` returns its count,
`gather` returns its list, `frozen_passes` runs every task's pass, `wrap` returns the model, and nothing
communicates. The stages never see a rank or the number of processes; their loops call `loss.backward()`
themselves.
"""
import atexit
import contextlib
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from colbench.data import grouped
from colbench.models import autocast


def init():
    """Under torchrun, join the process group; processes other than the first print nothing."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        atexit.register(leave)
    if not is_main():  # only the first process prints progress and summaries
        sys.stdout = open(os.devnull, "w")
        os.environ["TQDM_DISABLE"] = "1"


def leave():
    """At exit: leave the process group. A gloo thread may still be freeing the tensors of the last collective,
    which needs Python; once Python is shutting down, that aborts the process (SIGABRT, "terminate called without
    an active exception": pytorch/pytorch#190489). destroy_process_group joins those threads, except where FSDP's
    tensors keep the group alive: then a moment's sleep, with Python free, lets them finish."""
    if dist.is_initialized():
        dist.destroy_process_group()
        time.sleep(0.1)


def rank_and_world():
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def is_main():
    """Whether this process writes the outputs: the only one, or torchrun's first."""
    return rank_and_world()[0] == 0


class share:
    """`for item in share(items, model)`: this process's share of `items` (a plain run: all of them), a pass each.

    Under torchrun each process takes every N-th item, so when N does not divide the items some shares are a pass
    short; yet each pass's collectives need every process (DDP's gradient all-reduce, each FSDP forward's and
    backward's gathers). So given the DDP or FSDP `model`, a process whose share has ended runs `filler_pass`es
    until the others are done. (PyTorch's Join does not do here: FSDP2 is no Joinable, and under DDP a joined
    process all-reduces zeros, not the gradients it accumulated over its passes of the step.) DDP synchronizes
    gradients on each process's last pass only (no_sync before it), where every process adds its whole share."""

    def __init__(self, items, model=None):
        rank, world = rank_and_world()
        self.mine, self.model, self.passes = items[rank::world], model, math.ceil(len(items) / world)

    def __len__(self):
        return len(self.mine)

    def __iter__(self):
        communicates = isinstance(self.model, (DistributedDataParallel, FSDPModule))
        for i in range(self.passes if communicates else len(self.mine)):
            ddp_accumulates = isinstance(self.model, DistributedDataParallel) and i < self.passes - 1
            with self.model.no_sync() if ddp_accumulates else contextlib.nullcontext():
                if i < len(self.mine):
                    yield self.mine[i]
                else:
                    filler_pass(self.model)


def filler_pass(model):
    """A pass of the model on two tokens that adds nothing: a forward, and where gradients are on a backward of
    0 x its logits. DDP all-reduces and FSDP gathers and reduce-scatters the same whatever the input, so this
    process takes its part in another process's real pass."""
    logits = model(input_ids=torch.zeros(1, 2, dtype=torch.long, device=next(model.parameters()).device)).logits
    if torch.is_grad_enabled():
        (logits.sum() * 0).backward()


def per_process(count):
    """`count` items of a batch per process: what a process divides its summed loss by. DDP and FSDP average the
    processes' gradients, so each computes its share's sum over count / N, and their mean is the batch's mean
    (nanoGPT's train.py divides its gradient accumulation steps by the world size the same way)."""
    return count / rank_and_world()[1]


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
    """This process's list -> the lists of all processes concatenated in rank order (the same in every
    process). Tensors come back on the CPU, with one process too: all_gather_object would hand each
    process the others' tensors on the GPUs that made them. Callers move them to their device at use."""
    items = [to_cpu(item) for item in items]
    if not dist.is_initialized():
        return items
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, items)
    return [item for part in parts for item in part]


@torch.no_grad()
def frozen_passes(outputs_fn, model, views, trajectory_ids, autocast_dtype, desc):
    """critic.py's passes without gradients, a task's trajectories a pass (π_ref's log-probs, the held-out scores):
    {trajectory id: tensor} from outputs_fn(model, views, a task's trajectory ids) -> {id: tensor}, an id being
    (task id, sample index); each process a share of the tasks, every process getting all of them."""
    model.eval()
    mine, trajectory_ids_of_task = [], grouped(trajectory_ids, lambda trajectory_id: trajectory_id[0])
    for task_id in tqdm(share(sorted(trajectory_ids_of_task), model), desc=desc, unit="task"):
        with autocast(model.device, autocast_dtype):
            mine += outputs_fn(model, views, trajectory_ids_of_task[task_id]).items()
    return {i: output.to(model.device) for i, output in gather(mine)}  # torchrun: every process's


def wrap(model, fsdp=False, autocast_dtype=torch.float32):
    """The model to train under torchrun (else the model itself). DistributedDataParallel: a whole replica
    in each process, gradients averaged; its buffers (a causal LM's are constants, the rotary frequencies) are
    not broadcast at each forward, so that its forward passes communicate nothing and one filler_pass stands for
    a pass of any number of forwards (--fast's prefix, then its rows). With `fsdp`, FSDP2 in place: each decoder
    layer, then the rest, sharded across the processes (parameters, gradients and AdamW states: 1/N each) and
    gathered one layer at a time for the forward and the backward pass; with a bf16 `autocast_dtype` a layer is
    gathered in bf16 and gradients are averaged in fp32, the shards staying fp32. Create the optimizer
    afterwards: FSDP replaces the parameters."""
    if not dist.is_initialized():
        return model
    if not fsdp:
        return DistributedDataParallel(model, broadcast_buffers=False)
    if autocast_dtype == torch.bfloat16:
        precision = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        precision = MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=precision)
    # The root frees its gathered weights after each forward too (FSDP's default keeps them for the backward):
    # else, after an evaluation pass, model.parameters() are the gathered weights, not the shards the optimizer needs.
    return fully_shard(model, mp_policy=precision, reshard_after_forward=True)


def save_checkpoint(folder, model, tokenizer):
    """The whole model and its tokenizer saved into `folder` as a Hugging Face checkpoint. Every process
    calls this (under FSDP each sends its shards, gathered on the CPU); only the first writes, and gets True."""
    if isinstance(model, FSDPModule):
        weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        weights = model.state_dict()
    if not is_main():
        return False
    model.save_pretrained(folder, state_dict=weights)
    tokenizer.save_pretrained(folder)
    return True
