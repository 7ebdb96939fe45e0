"""DDP training that survives beyond one machine: any number of nodes, restarts, resume.

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
        --rdzv-endpoint HEAD_NODE:29400 --rdzv-id job42 launchers/multinode_train.py

What it adds to a single-node DDP script: every rank prints who it is (RANK, LOCAL_RANK,
GROUP_RANK: its node, WORLD_SIZE, and its agent's process id); rank 0 writes a checkpoint
every --save-every steps that a crash or a power cut mid-write never leaves torn, and every
rank resumes from it on start (after torchrun's --max-restarts); the batch of step s comes
from seed s, split between the ranks whatever their number (nb10/multinode_records.py), so
a resumed run replays the same data. --dtype float64 compares two runs by their mathematics,
not by fp32 rounding.
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from common.devices import init_distributed
from nb10.multinode_records import log_step, rank_share
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(path, model, optimizer, step):
    """Model, optimizer (its momentum) and step, to a temporary file renamed over `path`."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, f)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename: a power cut cannot leave it torn
    os.replace(tmp, path)  # atomic: readers see the old checkpoint or the new one
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename on disk too, or a power cut may bring the old one back
    finally:
        os.close(folder)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--global-batch", type=int, default=96, help="split over all ranks")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--save-every", type=int, default=5, help="checkpoint every N steps")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pretend work per step")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="metrics.json, progress.jsonl, checkpoints")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    identity = {name: os.environ[name] for name in
                ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    identity.update(host=socket.gethostname(), pid=os.getpid(), agent=os.getppid(), restart=restart)
    print("identity", *(f"{k}={v}" for k, v in identity.items()), flush=True)

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1)).to(device, dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    start_step = 0
    if os.path.exists(ckpt_path):  # every rank loads it (a shared filesystem across nodes)
        ckpt = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_step = ckpt["step"]
        if rank == 0:
            print(f"resumed from checkpoint at step {start_step} (restart {restart})", flush=True)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    losses = []
    for step in range(start_step, args.steps):
        x, y = rank_share(step, args.global_batch, rank, world_size)  # its part of the batch
        x, y = x.to(device, dtype), y.to(device, dtype)
        loss = nn.functional.mse_loss(ddp_model(x), y)
        optimizer.zero_grad()
        loss.backward()  # averaged over ranks: the same update as the whole global batch
        optimizer.step()
        losses.append(loss.item())
        time.sleep(args.step_seconds)
        done = step + 1
        if rank == 0:
            print(f"step {done:3d}/{args.steps}  loss {loss.item():.4f}  world {world_size}",
                  flush=True)
            log_step(args.out, done, loss.item(), world_size)  # to progress.jsonl
            if done % args.save_every == 0 or done == args.steps:
                save_checkpoint(ckpt_path, model, optimizer, done)

    gathered = [None] * world_size
    dist.gather_object(identity, gathered if rank == 0 else None)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(args.out, "final.pt"))
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "restart_count": restart, "resumed_from_step": start_step,
                       "steps": args.steps, "losses_this_attempt": losses,
                       "cpu_capability": torch.backends.cpu.get_cpu_capability()}, f)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
