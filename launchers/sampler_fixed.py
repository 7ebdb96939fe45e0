"""Pitfall 5, fixed: set_epoch every epoch, and an evaluation split without padding.

    torchrun --nproc-per-node 2 launchers/sampler_fixed.py

`sampler.set_epoch(epoch)` gives every epoch a new order (the same permutation on every
rank, so the shares still do not overlap). For evaluation each rank takes every
world_size-th sample, `range(rank, size, world_size)`: uneven shares, no sample twice.
"""

import argparse
import json
import os

import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="the sampler needs no device")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    os.makedirs(args.out, exist_ok=True)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dataset = list(range(args.size))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    seen = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # FIX: a new shuffle every epoch, the same on every rank
        seen.append([i for batch in loader for i in batch.tolist()])
    evaluated = list(range(rank, args.size, world_size))  # FIX: no padding for evaluation

    gathered = [None] * world_size
    dist.gather_object({"epochs": seen, "evaluated": evaluated}, gathered if rank == 0 else None)
    if rank == 0:
        counted = sorted(i for record in gathered for i in record["evaluated"])
        for epoch in range(args.epochs):
            print(f"epoch {epoch}: " + "   ".join(f"rank {r}: {rec['epochs'][epoch]}"
                                                 for r, rec in enumerate(gathered)))
        print(f"evaluation counted {len(counted)} samples of {args.size}")
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": "gloo", "ranks": gathered,
                       "size": args.size, "evaluated_count": len(counted),
                       "evaluated_distinct": len(set(counted))}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
