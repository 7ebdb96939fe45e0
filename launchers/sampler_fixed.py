"""Notebook 09 §3, fixed: set_epoch every epoch, and an evaluation split without padding.

    torchrun --nproc-per-node 2 launchers/sampler_fixed.py --size 11

`sampler.set_epoch(epoch)` gives every epoch a new order, the same permutation on every rank
(so the shares still do not overlap); the evaluation takes every world_size-th sample.
"""

import torch.distributed as dist
from common.devices import init_distributed
from nb09.sampler_shares import gather_shares, sampler_parser
from torch.utils.data import DataLoader, DistributedSampler


def main():
    args = sampler_parser(__doc__).parse_args()  # --size, --epochs, --device, --out
    device, backend = init_distributed(args.device)
    dataset = list(range(args.size))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    seen = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # FIX: a new shuffle every epoch, the same on every rank
        seen.append([i for batch in loader for i in batch.tolist()])
    rank, world_size = dist.get_rank(), dist.get_world_size()
    evaluated = list(range(rank, args.size, world_size))  # FIX: uneven shares, no padding
    gather_shares(args, seen, evaluated, backend)  # rank 0 prints the orders and the count
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
