"""Your first DDP program, torchrun form: CPU processes with gloo, or one GPU per rank with NCCL.

    torchrun --nproc-per-node 2 launchers/ddp_first_run.py --steps 60
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

# before init_process_group (torch 2.13): DDP imports this module, whose functions keep
# the process group as a default argument when it exists, so that destroy_process_group
# could not end the group; imported first, they keep None
import torch.distributed.nn  # noqa: F401
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def differing_from_rank0(tensors):
    """How many of these tensors differ from rank 0's, bit for bit (a collective: every rank)."""
    differing = 0
    for t in tensors:
        rank0s = t.detach().clone()
        dist.broadcast(rank0s, src=0)  # every rank now holds rank 0's values of this tensor
        differing += not torch.equal(t.detach(), rank0s)
    return differing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]),
                                         torch.cuda.device_count() if args.device == "cuda" else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    # device_id: NCCL connects the ranks now, not at the first collective
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    torchrun_vars = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    print("identity", *(f"{name}={os.environ[name]}" for name in torchrun_vars),
          f"pid={os.getpid()} parent={os.getppid()} device={device} backend={backend}")

    torch.manual_seed(rank)  # on purpose: every rank builds the model from its own seed
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    before = differing_from_rank0(model.parameters())
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    after_wrap = differing_from_rank0(model.parameters())
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)

    true_weights = torch.randn(20, 1, generator=torch.Generator().manual_seed(42))
    data = torch.Generator().manual_seed(1000 + rank)  # every rank draws different samples
    losses = []
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 20, generator=data)
        y = x @ true_weights + 0.1 * torch.randn(args.batch_size, 1, generator=data)
        loss = nn.functional.mse_loss(ddp_model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over all ranks during backward
        optimizer.step()
        losses.append(loss.item())
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {loss.item():.4f}")

    params = list(model.parameters())  # after training: still rank 0's, bit for bit?
    checksum = sum(p.double().sum().item() for p in params)  # to compare with other runs
    mine = {"losses": losses, "tensors": len(params), "differing_before_ddp": before,
            "differing_after_wrap": after_wrap, "differing_tensors": differing_from_rank0(params),
            "checksum": checksum}
    gathered = [None] * world_size
    dist.gather_object(mine, gathered if rank == 0 else None)  # every rank's record, on rank 0
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered}, f)
    # release DDP before the process group: DDP holds the group too, and if DDP lets go last,
    # the group's threads are stopped inside DDP's destructor, which can deadlock (gloo)
    del ddp_model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
