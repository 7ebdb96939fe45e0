"""Notebook 09 §4, uneven inputs (BROKEN ON PURPOSE): ranks with different numbers of batches.

    torchrun --nproc-per-node 2 launchers/pitfall_uneven.py --pg-timeout 5

Each rank reads its own shard, and the shards differ in length: rank r has
`--batches + r` batches (think: one file per rank, no DistributedSampler to even them
out). The rank with the fewest batches leaves the loop first; with gloo the others' next
forward waits in DDP's broadcast of rank 0's buffers (BatchNorm's running statistics), a
collective the finished rank never makes, until the process-group timeout.
"""

import faulthandler
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.devices import init_distributed
from common.glyphs import Net, make_dataset
from common.pitfall_harness import checksum, pitfall_parser, write_metrics
from torch.nn.parallel import DistributedDataParallel as DDP


def train_step(ddp_model, optimizer, x, y):
    """One DDP step: its forward and backward are collectives, every rank must call them."""
    loss = F.cross_entropy(ddp_model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main():
    parser = pitfall_parser(__doc__, watchdog=True)  # --pg-timeout, --watchdog, --device, --out
    parser.add_argument("--batches", type=int, default=4, help="rank r gets this + r batches")
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)

    torch.manual_seed(0)
    model = Net().to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    n_batches = args.batches + rank  # the shards are uneven
    x_all, y_all = make_dataset(n_batches * args.batch_size, seed=100 + rank)

    steps = 0
    for step in range(n_batches):  # BUG: the ranks run different numbers of steps
        if args.watchdog:  # re-armed every step: fires only if this step takes too long
            faulthandler.dump_traceback_later(args.watchdog, exit=False)
        first = step * args.batch_size
        x, y = x_all[first : first + args.batch_size], y_all[first : first + args.batch_size]
        train_step(ddp_model, optimizer, x.to(device), y.to(device))
        steps += 1
    print(f"finished my {steps} batches", flush=True)

    gathered = [None] * world_size
    mine = {"checksum": checksum(model), "batches": steps}
    dist.gather_object(mine, gathered if rank == 0 else None)
    if rank == 0:
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      steps=max(r["batches"] for r in gathered))
    faulthandler.cancel_dump_traceback_later()  # armed until here: the final gather included
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
