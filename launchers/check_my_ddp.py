"""Checks home-made DDP wrappers against torch's DistributedDataParallel, in float64.

    torchrun --nproc-per-node 2 launchers/check_my_ddp.py --impl launchers/my_ddp_naive.py:NaiveDDP

--impl FILE:CLASS (repeatable; FILE:CLASS:overlap when its all-reduces should start during
backward). For each wrapper, each --bucket-mb (if it takes bucket_mb) and each accumulation
(1 micro-batch, and --accumulate of them if it has no_sync()), every rank builds the same small
model from a seed of its own (so the ranks differ until someone broadcasts), wraps one copy in
the wrapper and one in DDP, and trains both --steps steps of SGD on its own batches.
Recorded: the largest parameter difference from DDP and across the ranks, the gradients' size
against DDP's at the first step, every dist.all_reduce and dist.broadcast the wrapper made
(elements, start time, whether its handle was waited for), and when each gradient was ready.
The model has what DDP must handle: a frozen layer, a tied input/output weight, a buffer.
"""

import argparse
import copy
import importlib.util
import inspect
import json
import os
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: see DDP's lazy import
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

TOLERANCE = 1e-10  # float64: another order of additions moves ~1e-16; a wrong gradient, %


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


class CheckNet(nn.Module):
    """Small, with every case DDP handles: tied weights, a frozen layer, a buffer."""

    def __init__(self, vocab=32, width=16, depth=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.frozen = nn.Linear(width, width).requires_grad_(False)  # never communicated
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one parameter, used twice
        self.register_buffer("scale", torch.rand(width) + 0.5)  # broadcast with the weights

    def forward(self, tokens):
        h = self.embed(tokens) * self.scale
        for layer in self.layers:
            h = torch.tanh(layer(h))
        return self.head(self.frozen(h))


class Waited:
    """An async handle that remembers whether anyone waited for it."""

    def __init__(self, work, record):
        self._work, self._record = work, record

    def wait(self, *args, **kwargs):
        self._record["waited"] = True
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._work, name)


class Recorder:
    """Wraps dist.all_reduce and dist.broadcast: while on, what the wrapper sent, and when."""

    def __init__(self):
        self.on, self.calls = False, []
        for name in ("all_reduce", "broadcast"):
            setattr(dist, name, self._recording(name, getattr(dist, name)))

    def _recording(self, name, call):
        def recorded(tensor, *args, **kwargs):
            record = {"op": name, "numel": tensor.numel(), "at": time.perf_counter(),
                      "waited": None}  # fmt: skip
            work = call(tensor, *args, **kwargs)
            if not self.on:
                return work
            self.calls.append(record)
            if work is None:
                return None
            record["waited"] = False
            return Waited(work, record)
        return recorded

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def flat_state(model):
    tensors = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return torch.cat([t.detach().reshape(-1) for t in tensors.values()])


def flat_grad(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


def largest_across_ranks(value):
    t = torch.tensor([float(value)], dtype=torch.float64, device=DEVICE)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def spread(model):
    """The largest difference of any rank's parameters and buffers from rank 0's."""
    mine = flat_state(model)
    first = mine.clone()
    dist.broadcast(first, src=0)
    return largest_across_ranks((mine - first).abs().max())


def train_step(model, step, rank, accumulate, recorder=None):
    """Zero, then forward and backward over `accumulate` micro-batches, all but the last
    under no_sync() (DDP's accumulation recipe); returns the calls recorded under no_sync."""
    model.zero_grad(set_to_none=True)
    calls_in_no_sync = 0
    for micro in range(accumulate):
        last = micro == accumulate - 1
        g = torch.Generator().manual_seed(1000 * step + 10 * micro + rank)  # each rank its own
        tokens, targets = torch.randint(32, (2, 6, 5), generator=g).to(DEVICE)
        with nullcontext() if last else model.no_sync():
            loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten()) / accumulate
            loss.backward()
        if recorder is not None and not last:
            calls_in_no_sync += len(recorder.take())
    return calls_in_no_sync


def check(cls, expects_overlap, bucket_mb, accumulate, steps, rank, world, recorder):
    torch.manual_seed(rank)  # unseeded, as far as the ranks can tell: each its own weights
    base = CheckNet().to(DEVICE).double()
    ids = [DEVICE.index] if DEVICE.type == "cuda" else None
    reference = DDP(copy.deepcopy(base), device_ids=ids)
    ready = []  # when each gradient was ready: hooks registered before the wrapper's run first
    for p in base.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda p: ready.append(time.perf_counter()))
    recorder.on = True
    mine = cls(base, **({} if bucket_mb is None else {"bucket_mb": bucket_mb}))
    recorder.on = False
    recorder.take()
    f = {"start_spread": spread(mine.module),
         "expected_elements": sum(p.numel() for p in base.parameters() if p.requires_grad)}
    mine_opt = torch.optim.SGD(mine.module.parameters(), lr=0.5)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    calls_in_no_sync, per_step, unwaited, overlapped = 0, [], 0, False
    for step in range(steps):
        ready.clear()
        recorder.on = True
        calls_in_no_sync += train_step(mine, step, rank, accumulate, recorder)
        mine.finish_gradient_synchronization()
        recorder.on = False
        calls = [c for c in recorder.take() if c["op"] == "all_reduce"]
        per_step.append(len(calls))
        f["reduced_elements"] = sum(c["numel"] for c in calls)
        unwaited += sum(c["waited"] is False for c in calls)
        overlapped = bool(calls and ready and min(c["at"] for c in calls) < max(ready))
        train_step(reference, step, rank, accumulate)
        if step == 0:  # the size of the first averaged gradients, against DDP's
            mine_grad, ddp_grad = flat_grad(mine.module), flat_grad(reference.module)
            f["grad_ratio"] = (mine_grad.norm() / ddp_grad.norm()).item()
        mine_opt.step()
        reference_opt.step()
    f["max_diff_vs_ddp"] = largest_across_ranks(
        (flat_state(mine.module) - flat_state(reference.module)).abs().max())
    f["max_diff_across_ranks"] = spread(mine.module)
    f.update(all_reduce_calls_per_step=max(per_step),
             calls_in_no_sync=int(largest_across_ranks(calls_in_no_sync)),
             unwaited=int(largest_across_ranks(unwaited)),
             reduce_started_in_backward=largest_across_ranks(overlapped) > 0)
    del reference  # before destroy_process_group: DDP's destructor needs the group
    return f | {"problems": problems(f, world, expects_overlap, steps)}


def problems(f, world, expects_overlap, steps):
    """What is wrong, in words, most telling first (an empty list: nothing)."""
    found = []
    if f["start_spread"] > TOLERANCE:
        found.append(f"the ranks started from different weights (largest difference "
                     f"{f['start_spread']:.2g}): broadcast rank 0's parameters and buffers "
                     "in __init__")
    if abs(f["grad_ratio"] - 1) > 1e-6:
        hint = ": divide the sum by the world size" if abs(f["grad_ratio"] - world) < 1e-3 else ""
        found.append(f"the averaged gradients are {f['grad_ratio']:.3g}x DDP's at {world} "
                     f"ranks{hint}")
    if f["unwaited"]:
        found.append(f"{f['unwaited']} asynchronous all-reduces (per rank, {steps} steps) were "
                     "never waited for "
                     "before optimizer.step(): call handle.wait() on each in "
                     "finish_gradient_synchronization(), or their sums may not have arrived")
    if f["calls_in_no_sync"]:
        found.append(f"{f['calls_in_no_sync']} all-reduces ran inside no_sync(): accumulation "
                     "steps must leave the gradients local")
    if f["reduced_elements"] != f["expected_elements"]:
        found.append(f"one step all-reduced {f['reduced_elements']} gradient elements, "
                     f"{f['expected_elements']} expected (each trainable parameter once: a tied "
                     "weight is one parameter, a frozen one has no gradient)")
    several = f["all_reduce_calls_per_step"] > 1
    if expects_overlap and several and not f["reduce_started_in_backward"]:
        found.append("no all-reduce started before the last gradient was ready: nothing overlaps "
                     "backward (start each one from a gradient hook, the buckets in the order "
                     "backward fills them: last layers first)")
    if f["max_diff_vs_ddp"] > TOLERANCE:
        found.append(f"after {steps} steps the weights differ from DDP's by up to "
                     f"{f['max_diff_vs_ddp']:.2g}")
    if f["max_diff_across_ranks"] > TOLERANCE:
        found.append(f"after {steps} steps the ranks' weights differ by up to "
                     f"{f['max_diff_across_ranks']:.2g}")
    return found


def main():
    global DEVICE
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--impl", action="append", required=True, help="FILE:CLASS[:overlap]")
    parser.add_argument("--bucket-mb", default="0.001,0.004,25",
                        help="bucket sizes (MiB) for wrappers that take bucket_mb")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=3,
                        help="micro-batches per step (the others under no_sync)")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    DEVICE, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]),
                                         torch.cuda.device_count() if args.device == "cuda" else 0)
    if DEVICE.type == "cuda":
        torch.cuda.set_device(DEVICE)
        torch.backends.cudnn.deterministic = True  # float64 equality: no nondeterministic kernels
    dist.init_process_group(backend, device_id=DEVICE if backend == "nccl" else None)
    recorder = Recorder()  # before the wrappers' files are loaded, whatever they import
    cases = []
    for spec in args.impl:  # FILE:CLASS[:overlap], split from the right (a path may hold ":")
        path, _, name = spec.removesuffix(":overlap").rpartition(":")
        module_spec = importlib.util.spec_from_file_location(f"impl_{name}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        cls, expects_overlap = getattr(module, name), spec.endswith(":overlap")
        takes_buckets = "bucket_mb" in inspect.signature(cls).parameters
        sizes = [float(b) for b in args.bucket_mb.split(",")] if takes_buckets else [None]
        accumulations = [1, args.accumulate] if hasattr(cls, "no_sync") else [1]
        for bucket_mb in sizes:
            for accumulate in accumulations:
                case = {"wrapper": cls.__name__, "bucket_mb": bucket_mb, "accumulate": accumulate}
                try:
                    case |= check(cls, expects_overlap, bucket_mb, accumulate, args.steps, rank,
                                  world, recorder)
                except Exception as err:  # the learner's code: say what it raised, go on
                    recorder.on = False
                    case["problems"] = [f"it raised {type(err).__name__}: {err}"]
                case["ok"] = not case["problems"]
                cases.append(case)
                if rank == 0:
                    print(f"{case['wrapper']} bucket_mb={bucket_mb} accumulate={accumulate}: "
                          + ("ok" if case["ok"] else "; ".join(case["problems"])), flush=True)
    ranks = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "pid": os.getpid(), "device": str(DEVICE)})
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world, "backend": backend, "tolerance": TOLERANCE,
                       "ranks": ranks, "cases": cases}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
