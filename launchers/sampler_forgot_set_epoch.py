"""Notebook 09 §3 (a wrong number, not a crash): no set_epoch, and a dataset that does not divide.

    torchrun --nproc-per-node 2 launchers/sampler_forgot_set_epoch.py --size 11

Each rank records the sample indices its DistributedSampler gives it, epoch by epoch, then
"evaluates" over the same padded shares (flags and report: nb09/sampler_shares.py).
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
    for _epoch in range(args.epochs):
        # BUG: sampler.set_epoch(epoch) is missing
        seen.append([i for batch in loader for i in batch.tolist()])
    evaluated = list(sampler)  # an "evaluation" over the same padded shares
    gather_shares(args, seen, evaluated, backend)  # rank 0 prints the orders and the count
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
