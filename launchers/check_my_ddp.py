"""Checks home-made DDP wrappers against torch's DistributedDataParallel, in float64.

    torchrun --nproc-per-node 2 launchers/check_my_ddp.py --impl launchers/my_ddp_naive.py:NaiveDDP

--impl FILE:CLASS (repeatable; FILE:CLASS:overlap when its all-reduces should start during
backward). For each wrapper, each --bucket-mb (if it takes bucket_mb) and each accumulation
(1 micro-batch, and --accumulate of them if it has no_sync()), every rank builds the same small
model from a seed of its own (so the ranks differ until someone broadcasts), wraps one copy in
the wrapper and one in DDP, and trains both --steps steps of SGD on its own batches;
nb07/ddp_checker.py records what the wrapper did and names what is wrong.
"""

import copy
import inspect
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common.devices import init_distributed
from nb07.ddp_checker import Cases, Facts, Recorder, options, wrapper_class
from torch.nn.parallel import DistributedDataParallel as DDP


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


def train_step(model, step, rank, accumulate, device, recorder=None):
    """Zero, then forward and backward over `accumulate` micro-batches, all but the last
    under no_sync() (DDP's accumulation recipe); returns the calls recorded under no_sync."""
    model.zero_grad(set_to_none=True)
    calls_in_no_sync = 0
    for micro in range(accumulate):
        last = micro == accumulate - 1
        g = torch.Generator().manual_seed(1000 * step + 10 * micro + rank)  # each rank its own
        tokens, targets = torch.randint(32, (2, 6, 5), generator=g).to(device)
        with nullcontext() if last else model.no_sync():
            loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten()) / accumulate
            loss.backward()
        if recorder is not None and not last:
            calls_in_no_sync += len(recorder.take())
    return calls_in_no_sync


def check(cls, bucket_mb, accumulate, steps, rank, recorder, device):
    """Your wrapper and torch's DDP trained side by side, each rank from its own start."""
    torch.manual_seed(rank)  # unseeded, as far as the ranks can tell: each its own weights
    base = CheckNet().to(device).double()
    reference = DDP(copy.deepcopy(base), device_ids=[device.index] if device.type == "cuda"
                    else None)  # fmt: skip
    facts = Facts(base, recorder, device)  # its hooks: when each gradient is ready
    with recorder:  # your wrapper's collectives, recorded
        mine = cls(base, **({} if bucket_mb is None else {"bucket_mb": bucket_mb}))
    facts.started(mine.module, bucket_mb)
    mine_opt = torch.optim.SGD(mine.module.parameters(), lr=0.5)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(steps):
        with recorder:
            facts.backward_returned(train_step(mine, step, rank, accumulate, device, recorder))
            mine.finish_gradient_synchronization()
        facts.synchronized(step)
        train_step(reference, step, rank, accumulate, device)
        facts.gradients(step, mine.module, reference.module)
        mine_opt.step()
        reference_opt.step()
    figures = facts.trained(mine.module, reference.module)
    del reference  # before destroy_process_group: DDP's destructor needs the group
    return figures


def main():
    args = options()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = True  # float64 equality: no nondeterministic kernels
    recorder = Recorder()  # before the wrappers' files are loaded, whatever they import
    cases = Cases(rank, world, args.steps, recorder)
    for spec in args.impl:  # FILE:CLASS[:overlap], split from the right (a path may hold ":")
        path, _, name = spec.removesuffix(":overlap").rpartition(":")
        cls = wrapper_class(path, name)
        takes_buckets = "bucket_mb" in inspect.signature(cls).parameters
        for bucket_mb in [float(b) for b in args.bucket_mb.split(",")] if takes_buckets else [None]:
            for accumulate in [1, args.accumulate] if hasattr(cls, "no_sync") else [1]:
                cases.run(check, spec, cls, bucket_mb, accumulate, args.steps, rank, recorder,
                          device)
    cases.write(args.out, args.impl, backend, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
