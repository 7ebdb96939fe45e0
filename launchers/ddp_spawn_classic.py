"""The classic minimal DDP program: mp.spawn starts one process per rank, no torchrun.

    python launchers/ddp_spawn_classic.py --nproc 2 --steps 60

On GPUs: one process per GPU, NCCL (at most one rank per GPU). On CPUs: N processes, gloo.
It trains the same model on the same data as the torchrun form (ddp_first_run.py), so the
two forms can be compared number for number: each rank prints its last loss and a checksum
of its parameters (all its digits).
"""

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.multiprocessing as mp
import torch.nn as nn
from common.devices import device_and_backend  # launchers/common/devices.py
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size, port, steps, device_type):
    os.environ["MASTER_ADDR"] = "127.0.0.1"  # where rank 0 waits for the others
    os.environ["MASTER_PORT"] = str(port)  # the same free port for every rank
    # one machine: every rank is local (local rank = rank, local world size = world size)
    n_gpus = torch.cuda.device_count() if device_type == "cuda" else 0
    device, backend = device_and_backend(device_type, rank, world_size, n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # first: this process owns GPU number `rank`
    # device_id: NCCL connects the ranks here; without it, at the first collective
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            device_id=device if backend == "nccl" else None)

    torch.manual_seed(0)  # the torchrun form's rank 0 seeds 0 too: the two forms' checksums compare
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)

    true_weights = torch.randn(20, 1, generator=torch.Generator().manual_seed(42))
    data = torch.Generator().manual_seed(1000 + rank)  # each rank: its own samples
    for _ in range(steps):
        x = torch.randn(32, 20, generator=data)
        y = x @ true_weights + 0.1 * torch.randn(32, 1, generator=data)
        loss = nn.functional.mse_loss(ddp_model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()  # gradients are all-reduced here: EVERY rank must reach this line
        optimizer.step()  # same averaged gradients everywhere -> replicas stay identical
    checksum = sum(p.double().sum().item() for p in model.parameters())
    # one write per line: the ranks share one pipe, and print() writes the newline apart
    sys.stdout.write(f"rank {rank}: loss {loss.item():.6f} checksum {checksum!r}\n")
    sys.stdout.flush()
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=torch.cuda.device_count() or 2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.device == "cuda" and not 1 <= args.nproc <= torch.cuda.device_count():
        sys.exit(f"--nproc {args.nproc}: NCCL needs a GPU of its own per rank, and "
                 f"{torch.cuda.device_count()} are visible (use --device cpu for gloo)")
    with socket.socket() as s:  # ask the operating system for a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.nproc, port, args.steps, args.device), nprocs=args.nproc)
