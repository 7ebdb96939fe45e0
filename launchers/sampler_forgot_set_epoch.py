"""Notebook 09 §3 (a wrong number, not a crash): no set_epoch, and a dataset that does not divide.

    torchrun --nproc-per-node 2 launchers/sampler_forgot_set_epoch.py

Each rank records the sample indices its DistributedSampler gives it, epoch by epoch, for a
dataset of --size samples. Without `sampler.set_epoch(epoch)` every epoch repeats epoch
0's order; and when --size does not divide by the number of ranks, the sampler pads by
repeating samples, so an evaluation over these shares counts some samples twice.
"""

import argparse

import torch
import torch.distributed as dist
from common.devices import init_distributed
from common.pitfall_harness import report_shares
from torch.utils.data import DataLoader, DistributedSampler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the tier's: the sampler is the same on all")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    device, backend = init_distributed(args.device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dataset = list(range(args.size))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    seen = []
    for _epoch in range(args.epochs):
        # BUG: sampler.set_epoch(epoch) is missing
        seen.append([i for batch in loader for i in batch.tolist()])
    evaluated = [i for i in sampler]  # an "evaluation" over the same padded shares

    gathered = [None] * world_size
    dist.gather_object({"epochs": seen, "evaluated": evaluated}, gathered if rank == 0 else None)
    if rank == 0:  # each epoch's order per rank, how many samples the evaluation counted
        report_shares(args.out, args.size, gathered, backend)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
