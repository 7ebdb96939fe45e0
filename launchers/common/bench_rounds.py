"""Timing rounds and memory footprints for benchmarks (notebooks 06 and 07): not their lesson.

Notebook 06's ddp_bench.py and notebook 07's my_ddp_bench.py time their variants here: a
`Trainer` is one variant's training step, `timed_rounds` runs every variant once per round, in
turn (interleaved), so that a busy machine slows them all alike, and keeps each step's slowest
rank. The bookkeeping (barriers, step counts, the slowest time) goes through a gloo group of
CPU tensors: an NCCL group has no CPU backend, and ranks that sit a variant out wait on the
CPU. What the launchers compare (the variants themselves) stays in the launchers.
"""

import resource
import sys
import time
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn.functional as F


def loss_of(out, y):
    return F.cross_entropy(out, y) if out.shape[1] == 10 else out.square().mean()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """One training step of one variant: a model, its optimizer, its batch."""

    def __init__(self, model, batch, width, device, reduce=None):
        self.model, self.device, self.reduce = model, device, reduce
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        self.x = torch.randn(batch, width, device=device)
        self.y = torch.randint(0, 10, (batch,), device=device)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with torch.profiler.record_function("step_forward"):  # named on a profiler's timeline
            loss = loss_of(self.model(self.x), self.y)
        loss.backward()
        if self.reduce:  # hand-made gradient averaging (the DDP variants do it in backward)
            with torch.profiler.record_function("step_wait"):  # waiting for the all-reduces
                self.reduce(self.model)
        self.opt.step()


def timed_rounds(variants, steps, rounds, device, rank, cpu, warmup=1):
    """variants: name -> (step function or None on ranks that sit out, ranks taking part).
    Returns name -> list of seconds per step (slowest rank), one per round. The bookkeeping
    (barrier, slowest time) goes through `cpu`, a gloo group of CPU tensors: ranks that sit
    a variant out wait there, on the CPU, with nothing running on their GPUs."""
    seconds = {name: [] for name in variants}
    for r in range(warmup + rounds):
        for name, (fn, ranks) in variants.items():
            sync(device)  # on a GPU: nothing of the last variant still running
            dist.barrier(group=cpu)
            start = time.perf_counter()
            if rank in ranks:
                for _ in range(steps[name] if isinstance(steps, dict) else steps):
                    fn()
                sync(device)  # on a GPU: the kernels, not only their launches, are timed
            mine = torch.tensor([time.perf_counter() - start])  # a CPU tensor: gloo
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=cpu)  # the slowest rank's
            if r >= warmup:
                seconds[name].append(mine.item() / (steps[name] if isinstance(steps, dict)
                                                    else steps))
    return seconds


def steps_for(fn, ranks, target_s, device, cpu):
    """How many steps of fn take about target_s seconds (timed on rank 0, shared over the
    gloo group `cpu`: the count is a CPU tensor)."""
    n = torch.tensor([1])
    if dist.get_rank() in ranks:
        fn()
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        n[0] = max(2, round(target_s / max(time.perf_counter() - start, 1e-6)))
    dist.broadcast(n, 0, group=cpu)
    return int(n.item())


def buckets_made(ddp):
    """The gradient buckets DDP really uses (bytes each), read from its reducer (a private
    method: None if this torch lacks it). DDP rebuilds them after its first step."""
    try:
        return [b.buffer().numel() * b.buffer().element_size()
                for b in ddp.reducer._get_zeros_like_grad_buckets()]
    except (AttributeError, RuntimeError):
        return None


FOOTPRINT = {}  # on a GPU: "model: DDP n ranks" -> the bytes that DDP added on this rank's GPU


@contextmanager
def footprint(device, name):
    """On a GPU, FOOTPRINT[name]: the tensor bytes the block added on this rank's GPU at its
    peak (a variant built and stepped: its model copy, batch, buckets, gradients, activations).
    The variants built before stay allocated and are not counted: max_memory_allocated, its
    peak reset first, over memory_allocated before (without the reset rank 0's peak would hold
    the one-process and DataParallel variants too)."""
    if device.type != "cuda":
        yield
        return
    sync(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    yield
    sync(device)
    FOOTPRINT[name] = torch.cuda.max_memory_allocated(device) - before


def peak_memory(device, world=1):
    """(bytes, what they are) of this rank's peak: on a GPU the tensors DDP's `world` ranks on
    the MLP added on it (footprint: not the CUDA context, not the allocator's cache, not the
    other variants), else, without the scaling part, the whole run's peak; on a CPU the
    process's peak resident memory (interpreter, torch and every variant included). ru_maxrss
    is KiB on Linux, bytes on macOS."""
    if device.type == "cuda":
        ddp = FOOTPRINT.get(f"matmul: DDP {world} rank{'s' * (world > 1)}")
        if ddp is not None:
            return ddp, (f"peak tensor bytes DDP's {world} ranks added on their GPUs (the MLP's "
                         "copy, batch, buckets, gradients, activations)")
        return (torch.cuda.max_memory_allocated(device),
                "peak tensor bytes allocated on the GPU, every variant of the run")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (peak if sys.platform == "darwin" else peak * 1024), "peak RSS of the rank process"

