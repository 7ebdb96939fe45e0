"""Notebook 08 §1, the hang, fixed: every rank reaches the checkpoint barrier.

    torchrun --nproc-per-node 2 launchers/pitfall_hang_fixed.py

Notebook 04's model and data (common/glyphs.py). Rank 0 saves a checkpoint every few
steps; then EVERY rank waits at the barrier (outside the `if`), so no rank reads or
overwrites the checkpoint before it is complete.
`--pg-timeout` bounds every collective (torch's default: 30 minutes for gloo, 10 for
NCCL); `--watchdog S` makes each rank print where it is (faulthandler) when a step takes
longer than S seconds.
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


def main():
    parser = pitfall_parser(__doc__, watchdog=True)  # --pg-timeout, --watchdog, --device, --out
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--checkpoint-every", type=int, default=3)
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    model = Net().to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x_all, y_all = make_dataset(args.steps * args.batch_size * world_size, seed=1)

    for step in range(args.steps):
        if args.watchdog:  # re-armed every step: fires only if this step takes too long
            faulthandler.dump_traceback_later(args.watchdog, exit=False)
        first = (step * world_size + rank) * args.batch_size
        x, y = x_all[first : first + args.batch_size], y_all[first : first + args.batch_size]
        loss = F.cross_entropy(ddp_model(x.to(device)), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # a collective: every rank must get here, every step
        optimizer.step()
        if rank == 0:
            print(f"step {step}  loss {loss.item():.4f}", flush=True)
        if (step + 1) % args.checkpoint_every == 0:
            if rank == 0:
                torch.save(model.state_dict(), os.path.join(args.out, "checkpoint.pt"))
            dist.barrier()  # FIX: every rank makes the same collective calls, in the same order
    faulthandler.cancel_dump_traceback_later()

    gathered = [None] * world_size
    dist.gather_object({"checksum": checksum(model)}, gathered if rank == 0 else None)
    if rank == 0:
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      steps=args.steps)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
