"""Your three DDPs and torch's, measured side by side: step time, calls per step, overlap.

    torchrun --nproc-per-node 2 launchers/my_ddp_bench.py --naive launchers/my_ddp_naive.py \
        --overlapped launchers/my_ddp_overlapped.py --bucketed launchers/my_ddp_bucketed.py \
        --layers 50 --width 256 --batch 32 --steps 5 --rounds 7 --bucket-mb 0.5,2,8,25

One model of many tensors (--layers x Linear(--width, --width)): each variant trains its own
copy. The step times come from notebook 06's interleaved rounds (common/bench_rounds.py): every
round runs every variant once, in turn, so that a busy machine slows them all alike; a step
takes its slowest rank's time; the median over --rounds rounds is kept. Then the fastest
bucketed version that makes several buckets and DDP run single steps under torch.profiler
(common/step_profile.py): the share of the all-reduce time that ran inside backward (the
median of 5 steps), and the bucketed step's timeline.
"""

import argparse
import copy
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn as nn
from common.bench_rounds import Trainer, buckets_made, timed_rounds
from common.devices import init_distributed
from common.step_profile import profiled_steps
from nb07.ddp_checker import all_reduce_calls, wrapper_class
from torch.nn.parallel import DistributedDataParallel as DDP


def finish(model):
    model.finish_gradient_synchronization()  # your wrappers: the all-reduces complete here


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--naive", required=True, help="the file of NaiveDDP")
    parser.add_argument("--overlapped", required=True, help="the file of OverlappedDDP")
    parser.add_argument("--bucketed", required=True, help="the file of BucketedDDP")
    # the race's sizes come from notebook 07 (BENCH_ARGS): required, no default to drift
    parser.add_argument("--bucket-mb", required=True, help="bucket sizes for BucketedDDP (MiB)")
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True, help="samples per rank and step")
    parser.add_argument("--steps", type=int, required=True, help="steps per variant and round")
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    cpu = dist.new_group(backend="gloo")  # bookkeeping (barriers, slowest rank) on CPU tensors

    torch.manual_seed(0)
    layers = [nn.Linear(args.width, args.width) for _ in range(args.layers)]
    base = nn.Sequential(*layers).to(device)
    sizes = [float(b) for b in args.bucket_mb.split(",")]
    made = {"naive": wrapper_class(args.naive, "NaiveDDP")(copy.deepcopy(base)),
            "overlapped": wrapper_class(args.overlapped, "OverlappedDDP")(copy.deepcopy(base))}
    bucketed = wrapper_class(args.bucketed, "BucketedDDP")
    made |= {f"bucketed {b:g} MiB": bucketed(copy.deepcopy(base), bucket_mb=b) for b in sizes}
    trainers = {k: Trainer(m, args.batch, args.width, device, finish) for k, m in made.items()}
    ddp = DDP(copy.deepcopy(base), device_ids=[device.index] if device.type == "cuda" else None)
    trainers["torch DDP"] = Trainer(ddp, args.batch, args.width, device)

    everyone = set(range(world))
    if rank == 0:
        print(f"timing {len(trainers)} variants, {args.rounds} rounds of {args.steps} steps each",
              flush=True)
    seconds = timed_rounds({k: (t.step, everyone) for k, t in trainers.items()},
                           args.steps, args.rounds, device, rank, cpu)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    calls = {k: all_reduce_calls(t) for k, t in trainers.items() if k != "torch DDP"}
    ddp_buckets = buckets_made(ddp)  # DDP makes one all-reduce per bucket
    calls["torch DDP"] = len(ddp_buckets) if ddp_buckets is not None else None
    bucketed_names = [k for k in median if k.startswith("bucketed")]
    best = min(bucketed_names, key=median.get)
    # the timeline shows buckets under backward: the fastest size that makes several
    several = [k for k in bucketed_names if calls[k] > 1] or bucketed_names[:1]
    shown = min(several, key=median.get)
    if rank == 0:
        print(f"profiling single steps of {shown} and torch DDP", flush=True)
    # the median of 5 profiled steps: (overlap, what was timed, the timeline's events, profile)
    profiles = {name: profiled_steps(trainers[name].step, device, 5)[5 // 2]
                for name in (shown, "torch DDP")}
    ranks = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "pid": os.getpid(), "device": str(device)})
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({
                "world_size": world, "backend": backend, "ranks": ranks,
                "tensors": len(list(base.parameters())),
                "grad_mb": sum(p.numel() * p.element_size() for p in base.parameters()) / 2**20,
                "seconds": seconds, "median_s": median, "all_reduce_calls": calls,
                "ddp_bucket_bytes": ddp_buckets, "best_bucketed": best, "profiled": shown,
                "overlap": {k: v[0] for k, v in profiles.items()},
                "overlap_basis": profiles[shown][1], "timeline": profiles[shown][2],
            }, f)
    del ddp, trainers  # before destroy_process_group: DDP's destructor needs the group
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
