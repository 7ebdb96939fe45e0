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

import argparse
import faulthandler
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from train_step1_data import Net, make_dataset


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def log_metrics(step, loss):
    """Print the loss averaged over the ranks."""
    mean = loss.detach().clone()
    dist.all_reduce(mean)  # the sum over the ranks
    print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=2)
    parser.add_argument("--bad-step", type=int, default=3, help="the last rank gets a NaN here")
    parser.add_argument("--pg-timeout", type=lambda s: timedelta(seconds=float(s)),
                        help="seconds per collective (default: torch's, 30 min gloo, 10 NCCL)")
    parser.add_argument("--watchdog", type=float, default=0, help="dump stacks after S s; 0: off")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, timeout=args.pg_timeout,
                            device_id=device if backend == "nccl" else None)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    model = Net().to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x_all, y_all = make_dataset(args.steps * args.batch_size * world_size, seed=1)

    losses = []  # [step, this rank's loss]
    for step in range(args.steps):
        if args.watchdog:  # re-armed every step: fires only if this step takes too long
            faulthandler.dump_traceback_later(args.watchdog, exit=False)
        first = (step * world_size + rank) * args.batch_size
        x = x_all[first : first + args.batch_size].clone()
        y = y_all[first : first + args.batch_size]
        if step == args.bad_step and rank == world_size - 1:
            x[0, 0, 0, 0] = float("nan")  # a corrupt sample, on the last rank only
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
    faulthandler.cancel_dump_traceback_later()

    checksum = sum(p.double().sum().item() for p in model.parameters())
    gathered = [None] * world_size
    dist.gather_object({"checksum": checksum, "losses": losses}, gathered if rank == 0 else None)
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "steps": args.steps}, f)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
