"""Notebook 08 §4, exercise (HANGS AS SHIPPED): where does each rank wait? Then fix it.

    torchrun --nproc-per-node 2 launchers/pitfall_logging.py --log-every 2 --bad-step 3

§1's fixed loop plus two things real scripts have: a helper that logs the loss averaged
over the ranks every --log-every steps, and a guard that stops training when the loss is
not finite (at --bad-step the last rank's batch holds a NaN). metrics.json gets every
rank's losses and parameter checksum.
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


def log_metrics(step, loss):
    """Print the loss averaged over the ranks."""
    mean = loss.detach().clone()
    dist.all_reduce(mean)  # the sum over the ranks
    print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)


def main():
    parser = pitfall_parser(__doc__, watchdog=True)  # --pg-timeout, --watchdog, --device, --out
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=2)
    parser.add_argument("--bad-step", type=int, default=3, help="the last rank gets a NaN here")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    model = Net().to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    losses = []  # [step, this rank's loss]
    # the last rank's batch at --bad-step holds a NaN; --watchdog re-armed every step
    for step, (x, y) in enumerate(rank_batches(args, rank, world_size, args.bad_step)):
        loss = F.cross_entropy(ddp_model(x.to(device)), y.to(device))
        if not torch.isfinite(loss):
            print(f"step {step}  loss is {loss.item()}: stopping\n", end="", flush=True)
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # a collective: every rank must get here, every step
        optimizer.step()
        losses.append([step, loss.item()])
        if rank == 0 and (step + 1) % args.log_every == 0:
            log_metrics(step, loss)
        if (step + 1) % args.checkpoint_every == 0:
            if rank == 0:
                torch.save(model.state_dict(), os.path.join(args.out, "checkpoint.pt"))
            dist.barrier()  # nobody reads or overwrites the checkpoint before it is complete

    gathered = [None] * world_size
    mine = {"checksum": checksum(model), "losses": losses}
    dist.gather_object(mine, gathered if rank == 0 else None)
    if rank == 0:
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      steps=args.steps)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
