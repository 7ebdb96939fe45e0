"""Notebook 08 §1, the hang: a checkpoint barrier that only rank 0 reaches, and its fix.

    torchrun --nproc-per-node 2 launchers/pitfall_hang.py --pg-timeout 5 --watchdog 2
    torchrun --nproc-per-node 2 launchers/pitfall_hang_fixed.py

Notebook 04's model and data (common/glyphs.py). Rank 0 saves a checkpoint every few steps,
then waits at a barrier so that no rank reads or overwrites a half-written file.
pitfall_hang.py (BROKEN ON PURPOSE) has the barrier inside `if rank == 0:`: the other ranks
never arrive, they go on to the next step and wait there. pitfall_hang_fixed.py has it
outside, where every rank waits; the two files differ in that line only.
`--pg-timeout` bounds every collective (torch's default: 30 minutes for gloo, 10 for
NCCL); `--watchdog S` makes each rank print where it is (faulthandler) when a step takes
longer than S seconds.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.devices import init_distributed
from common.glyphs import Net
from common.pitfall_harness import checksum, pitfall_parser, rank_batches, write_metrics
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

    for step, (x, y) in enumerate(rank_batches(args, rank, world_size)):  # re-arms --watchdog
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

    gathered = [None] * world_size
    dist.gather_object({"checksum": checksum(model)}, gathered if rank == 0 else None)
    if rank == 0:
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      steps=args.steps)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
