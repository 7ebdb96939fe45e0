"""The harness of allreduce_bench.py (notebooks 02, 06 and 11 run it): not its lesson.

Sizes given as text, the timing of one call started together on every rank, the rounds that
time every call once each, a ring loaded from a file, an MLP's gradients as the calls DDP
would make, rank 0's single-process copy bandwidth and the table the launcher prints.
"""

import importlib.util
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def parse_bytes(text):
    """'64M' -> 67108864; plain numbers are bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    unit = text[-1].upper()
    return int(float(text[:-1]) * units[unit]) if unit in units else int(text)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # GPU calls return before the work is done


def timed(fn, device):
    """Seconds one call of fn() takes on this rank, started together with the other ranks."""
    dist.barrier()
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def timed_rounds(calls, device, warmup, iters):
    """{name: [seconds of each round]}: `warmup` untimed rounds, then `iters` timed ones, each
    round every call once, so that drift hits all alike."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    times = {name: [] for name in calls}
    for _ in range(iters):
        for name, fn in calls.items():
            times[name].append(timed(fn, device))
    return times


def copy_bandwidth(nbytes, device, repeats=10):
    """Bytes per second that one process copies from one buffer to another."""
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 2):
        sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times[2:])


def load_ring(path):
    """The module of FILE, whose ring_all_reduce(tensor, group=None) the launcher times."""
    spec = importlib.util.spec_from_file_location("ring", path)
    ring = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ring)
    return ring


def with_gradients(calls, width, device, sizes):
    """(the gradients, calls with two more): the gradients of an MLP of `width`, all-reduced as
    one flat bucket (as DDP does) and as one call per parameter tensor, both placed among the
    library's sizes where the bucket's size falls, so each round times them right there."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, 10)).to(device)
    model(torch.randn(64, width, device=device)).square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    bucket = torch.cat([g.view(-1) for g in grads])  # one flat buffer, like a DDP bucket
    calls = {**calls, "grad bucket": lambda: dist.all_reduce(bucket),
             "grad per tensor": lambda: [dist.all_reduce(g) for g in grads]}
    place = sum(size < bucket.numel() * 4 for size in sizes)
    names = list(calls)
    names = names[:place] + names[-2:] + names[place:-2]
    return grads, {name: calls[name] for name in names}


def print_table(rows, backend, world_size, iters, copy_bps):
    """Every 4th size and the last, with time, algbw and busbw; then the copy bandwidth."""
    print(f"{'bytes':>10} {'time_us':>10} {'algbw_GBps':>11} {'busbw_GBps':>11}  ({backend}, "
          f"{world_size} ranks, median of {iters}; every 4th size shown, all in metrics.json)")
    for i, row in enumerate(rows):
        if i % 4 == 0 or i == len(rows) - 1:
            print(f"{row['bytes']:>10} {row['seconds'] * 1e6:>10.1f} {row['algbw'] / 1e9:>11.3f} "
                  f"{row['busbw'] / 1e9:>11.3f}")
    print(f"single-process copy: {copy_bps / 1e9:.2f} GB/s")
