"""What an all-reduce costs: time per call over message sizes, as NVIDIA's nccl-tests report it.

    torchrun --nproc-per-node 2 launchers/allreduce_bench.py --max-bytes 64M

For each size: warm-up calls, then --iters timed calls, each started together after a
barrier; a call's time is the slowest rank's, and we keep the median over the calls
(metrics.json also keeps every call's time: rounds, ring_rounds, bucket/per_tensor_rounds).
    algbw = bytes / time                  (what one rank's buffer sees)
    busbw = algbw * 2 (p - 1) / p         (p ranks: what each link carries in a ring)
Also, in the same rounds (so that every figure sees the same machine):
  --ring FILE    the ring_all_reduce() of FILE on the same sizes, to compare with the library;
  --model-width  the gradients of an MLP, all-reduced as one flat bucket (as DDP does)
                 and as one call per parameter tensor;
and rank 0's single-process copy bandwidth, the ceiling for moving bytes in memory, and the
load average as the sweep began.
"""

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
from common import allreduce_rounds as harness  # timing rounds and table: launchers/common/
from common.devices import init_distributed


def byte_sizes(min_bytes, max_bytes, factor):
    """The message sizes of the sweep, in bytes (of float32 tensors): min_bytes (at least 4)
    times powers of factor, up to max_bytes."""
    sizes, size = [], max(4, harness.parse_bytes(min_bytes))
    while size <= harness.parse_bytes(max_bytes):
        sizes.append(size)
        size *= factor
    return sizes


def more_calls(calls, buffers, args, device):
    """(calls, the gradients): the library's calls plus, to time in the same rounds, --ring
    FILE's ring_all_reduce() on the same buffers and --model-width's gradients (one flat
    bucket, as DDP, and one call per tensor)."""
    if args.ring:
        ring = harness.load_ring(args.ring)
        calls = {**calls, **{f"ring {size}": (lambda b=buffer: ring.ring_all_reduce(b))
                             for size, buffer in buffers.items()}}  # fmt: skip
    if not args.model_width:
        return calls, []
    grads, calls = harness.with_gradients(calls, args.model_width, device, list(buffers))
    return calls, grads


def copy_ceiling(nbytes, device, rank):
    """Rank 0's single-process copy bandwidth (bytes/s; None elsewhere), the others waiting."""
    dist.barrier()
    copy_bps = harness.copy_bandwidth(nbytes, device) if rank == 0 else None
    dist.barrier()
    return copy_bps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-bytes", default="4")
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--factor", type=int, default=2, help="ratio between successive sizes")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--ring", help="a file that defines ring_all_reduce(tensor, group=None)")
    parser.add_argument("--model-width", type=int, default=0, help="0: no gradient all-reduce")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    # gloo copies CUDA tensors through host memory for its collectives (the copies would be
    # timed too) and its send/recv (--ring) take CPU tensors only: with gloo (ranks sharing
    # a GPU) the buffers stay on the CPU and the figures are gloo's own
    device = device if backend == "nccl" else torch.device("cpu")

    sizes = byte_sizes(args.min_bytes, args.max_bytes, args.factor)  # bytes, of float32 tensors
    buffers = {size: torch.ones(size // 4, device=device) for size in sizes}
    calls = {f"library {size}": (lambda b=buffers[size]: dist.all_reduce(b)) for size in sizes}
    calls, grads = more_calls(calls, buffers, args, device)  # --ring, --model-width
    # how busy the machine was as the sweep began (1-minute load average): a figure, no cause
    load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    # rounds: every size once per round, so drift hits all alike; each call after a barrier
    times = harness.timed_rounds(calls, device, args.warmup, args.iters)
    copy_bps = copy_ceiling(max(sizes[-1], 64 * 2**20), device, rank)

    per_rank = [None] * world_size
    dist.all_gather_object(per_rank, times)
    if rank == 0:
        # a collective is done when its slowest rank is: max over ranks, then median over calls
        slowest = {name: [max(r[name][i] for r in per_rank) for i in range(args.iters)]
                   for name in calls}
        median = {name: statistics.median(times) for name, times in slowest.items()}
        rows = []
        for size in sizes:
            t = median[f"library {size}"]
            algbw = size / t
            busbw = algbw * 2 * (world_size - 1) / world_size
            row = {"bytes": size, "seconds": t, "algbw": algbw, "busbw": busbw,
                   "rounds": slowest[f"library {size}"]}
            if args.ring:
                row["ring_seconds"] = median[f"ring {size}"]
                row["ring_rounds"] = slowest[f"ring {size}"]
            rows.append(row)
        harness.print_table(rows, backend, world_size, args.iters, copy_bps)
        metrics = {"world_size": world_size, "backend": backend, "device": str(device),
                   "iters": args.iters, "sizes": rows, "copy_bandwidth": copy_bps,
                   "load_average": load_average, "ranks": [{"rank": r} for r in range(world_size)]}
        if grads:
            metrics["grad"] = {"tensor_bytes": [g.numel() * 4 for g in grads],
                               "bucket_seconds": median["grad bucket"],
                               "per_tensor_seconds": median["grad per tensor"],
                               "bucket_rounds": slowest["grad bucket"],
                               "per_tensor_rounds": slowest["grad per tensor"]}
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump(metrics, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
