"""The classic minimal DDP program: mp.spawn, one process per GPU, NCCL.

Run with `python launchers/ddp_spawn_classic.py` (not torchrun: it starts its own processes).
It needs at least one CUDA GPU; the torchrun form (ddp_first_run.py) runs anywhere.
"""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"  # where rank 0 waits for the others
    os.environ["MASTER_PORT"] = str(port)  # the same free port for every rank
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)  # this process owns GPU number `rank`

    model = nn.Linear(10, 1).to(rank)
    ddp_model = DDP(model, device_ids=[rank])  # broadcasts rank 0's weights to all ranks
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)

    x = torch.randn(32, 10, device=rank)  # each rank: its own batch
    y = torch.randn(32, 1, device=rank)
    loss = nn.functional.mse_loss(ddp_model(x), y)
    loss.backward()  # gradients are all-reduced here: EVERY rank must reach this line
    optimizer.step()  # same averaged gradients everywhere -> replicas stay identical
    print(f"rank {rank}: loss {loss.item():.4f}")
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    if world_size == 0:
        sys.exit("the classic form needs at least one CUDA GPU (NCCL); use the torchrun form")
    with socket.socket() as s:  # ask the operating system for a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world_size, port), nprocs=world_size)
