"""Notebook 08 §2, the silent desync: one rank skips a bad batch alone, and the fix.

    torchrun --nproc-per-node 2 launchers/pitfall_desync.py --bad-step 2 --pg-timeout 5
    torchrun --nproc-per-node 2 launchers/pitfall_desync_fixed.py --bad-step 2

At `--bad-step` the last rank's batch is corrupted (a NaN) and its loss is not finite.
pitfall_desync.py (BROKEN ON PURPOSE): that rank skips the step alone (no backward, no
optimizer step). Nothing fails: its next backward is paired with the other ranks' previous
one, every step from there on is out of phase, and only the final collective, which one rank
reaches with a backward still pending, times out. pitfall_desync_fixed.py: the ranks decide
together, one all-reduce of a 0/1 flag (MAX) per step, and either every rank skips the step
or none does. Every rank prints its parameter checksum after each step: compare them.
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
    parser.add_argument("--bad-step", type=int, default=2, help="the last rank gets a NaN here")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)

    torch.manual_seed(0)
    model = Net(norm="layer").to(device)  # no BatchNorm: no buffers for DDP to broadcast
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    for step, (x, y) in enumerate(rank_batches(args, rank, world_size, args.bad_step)):
        loss = F.cross_entropy(ddp_model(x.to(device)), y.to(device))
        if not torch.isfinite(loss):
            print(f"step {step}  loss is {loss.item()}: skipping this batch\n", end="", flush=True)
            continue  # BUG: a decision only this rank makes; the others do not skip
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # a collective: every rank must get here, every step
        optimizer.step()
        line = f"step {step}  loss {loss.item():.4f}  checksum {checksum(model):.10f}\n"
        print(line, end="", flush=True)  # one write, its newline included: notebook 08 §3

    gathered = [None] * world_size
    dist.gather_object({"checksum": checksum(model)}, gathered if rank == 0 else None)
    if rank == 0:
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      steps=args.steps)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
