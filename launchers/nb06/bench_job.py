"""The job around notebook 06's benchmark (ddp_bench.py): its options, the parts run in turn,
each rank's peak memory and metrics.json; and its sweep, the scaling part's comparison again
over the batch per rank. Not the lesson: the launcher builds the variants the parts compare;
this module runs them and writes down what they measured.
"""

import argparse
import copy
import json
import os
import time

import torch
import torch.distributed as dist
from common import bench_rounds
from common.bench_rounds import Trainer, steps_for, timed_rounds
from torch.nn.parallel import DistributedDataParallel as DDP

from nb06.scaling_models import mlp


def options(argv=None):
    """ddp_bench.py's command line; lists come back split (--parts, --sweep-batches, ...)."""
    parser = argparse.ArgumentParser(description="DP vs DDP, measured (notebook 06)")
    parser.add_argument("--parts", default="scaling,sweep,buckets,profile")
    # the lesson's numbers come from notebook 06 (BENCH_ARGS): required, no default to drift
    parser.add_argument("--width", type=int, required=True, help="MLP width (scaling)")
    parser.add_argument("--depth", type=int, default=4, help="hidden layers of the MLP")
    parser.add_argument("--batch", type=int, required=True, help="batch per rank (scaling)")
    parser.add_argument("--py-width", type=int, default=16, help="python model: layer width")
    parser.add_argument("--py-layers", type=int, default=8, help="python model: layers")
    parser.add_argument("--py-gate", type=int, default=512, help="python model: Python terms")
    parser.add_argument("--py-batch", type=int, required=True, help="batch per rank (python)")
    parser.add_argument("--sweep-width", type=int, required=True, help="MLP width (sweep)")
    parser.add_argument("--sweep-batches", required=True, help="batches per rank, comma separated")
    parser.add_argument("--bucket-layers", type=int, required=True, help="buckets' model: layers")
    parser.add_argument("--bucket-width", type=int, required=True,
                        help="buckets' model: Linear(width, width)")
    parser.add_argument("--bucket-batch", type=int, required=True, help="buckets' batch per rank")
    parser.add_argument("--bucket-caps", required=True,
                        help="bucket_cap_mb values (MiB), comma separated")
    parser.add_argument("--profile-bucket-mb", type=float, required=True,
                        help="bucket_cap_mb of the profiled step")
    parser.add_argument("--profile-steps", type=int, default=3, help="profiled steps (median)")
    parser.add_argument("--rounds", type=int, required=True, help="interleaved rounds (median)")
    parser.add_argument("--target-s", type=float, required=True,
                        help="seconds per measurement")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args(argv)
    args.sweep_batches = [int(b) for b in args.sweep_batches.split(",")]
    args.bucket_caps = [float(c) for c in args.bucket_caps.split(",")]
    args.parts = args.parts.split(",")
    return args


def run_parts(args, parts, device, backend, cpu):
    """Runs each of --parts (parts: name -> a function of no arguments returning its figures)
    in turn; rank 0 then writes metrics.json: the run's settings, each part's figures and the
    load average as it started, each rank's peak memory (`cpu`: the gloo group)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    metrics = {"world_size": world, "backend": backend, "device": str(device),
               "threads_per_rank": args.threads, "rounds": args.rounds, "options": vars(args),
               "torch": torch.__version__, "cpus": os.cpu_count(),
               "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    os.makedirs(args.out, exist_ok=True)
    for part in args.parts:
        metrics[f"load_average_{part}"] = os.getloadavg()[0]  # as the part starts
        start = time.perf_counter()
        metrics[part] = parts[part]()
        if rank == 0:
            print(f"{part} measured in {time.perf_counter() - start:.1f} s", flush=True)
    peaks = [None] * world
    mine = (*bench_rounds.peak_memory(device, world), bench_rounds.FOOTPRINT)
    dist.all_gather_object(peaks, mine, group=cpu)
    if rank == 0:
        metrics["ranks"] = [{"rank": r, "peak_bytes": peaks[r][0], "peak_what": peaks[r][1],
                             "footprint_bytes": peaks[r][2]} for r in range(world)]
        metrics["load_average_after"] = list(os.getloadavg())
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump(metrics, f)


def part_sweep(args, device, rank, world, cpu, again):
    """Per batch per rank (--sweep-batches): 1 process against DDP on N ranks, side by side,
    on the MLP. At the scaling part's own point (`again`: its N-rank DDP step, batch per rank
    and width) that DDP steps in the same rounds too: the two agree, or the difference is not
    the time between the parts."""
    points = []
    for batch in args.sweep_batches:
        torch.manual_seed(0)
        base = mlp(args.sweep_width, args.depth).to(device)
        one = Trainer(copy.deepcopy(base), batch, args.sweep_width, device)
        ddp = Trainer(DDP(copy.deepcopy(base), device_ids=[device.index]
                          if device.type == "cuda" else None), batch, args.sweep_width, device)
        steps = steps_for(one.step, {0}, args.target_s / 2, device, cpu)
        variants = {"1 process": (one.step, {0}), f"{world} ranks": (ddp.step, set(range(world)))}
        if (again.get("batch"), again.get("width")) == (batch, args.sweep_width):
            variants["the scaling part's DDP"] = again["step"]
        seconds = timed_rounds(variants, steps, args.rounds, device, rank, cpu)
        points.append({"batch_per_rank": batch, "width": args.sweep_width, "depth": args.depth,
                       "grad_bytes": 4 * sum(p.numel() for p in base.parameters()),
                       "steps": steps, "seconds": seconds})
    return points
