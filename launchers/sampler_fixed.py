"""Notebook 09 §3, fixed: set_epoch every epoch, and an evaluation split without padding.

    torchrun --nproc-per-node 2 launchers/sampler_fixed.py

`sampler.set_epoch(epoch)` gives every epoch a new order (the same permutation on every
rank, so the shares still do not overlap). For evaluation each rank takes every
world_size-th sample, `range(rank, size, world_size)`: uneven shares, no sample twice.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the tier's: the sampler is the same on all")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
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
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "size": args.size, "evaluated_count": len(counted),
                       "evaluated_distinct": len(set(counted))}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
