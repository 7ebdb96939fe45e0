"""A WRONG fix of notebook 09's exercise (for the tests): the test shares taken from a
DistributedSampler, which pads 101 samples to 102: one sample is counted twice.
"""

import argparse
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-size", type=int, default=256)
    parser.add_argument("--test-size", type=int, default=101)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--pg-timeout", type=lambda s: timedelta(seconds=float(s)),
                        help="seconds per collective (default: torch's, 30 min gloo, 10 NCCL)")
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
    train_x, train_y = make_dataset(args.train_size, seed=1)
    test_x, test_y = make_dataset(args.test_size, seed=2)
    train_set = TensorDataset(torch.arange(args.train_size), train_x, train_y)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    first_batches, evals = [], []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # fix 1: a new order every epoch (else every epoch is epoch 0)
        for i, (index, x, y) in enumerate(loader):
            if i == 0:
                first_batches.append(index.tolist())  # which samples this rank saw first
            loss = F.cross_entropy(ddp_model(x.to(device)), y.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        # evaluation: each rank scores every world_size-th test sample, then the sums add up
        model.eval()
        with torch.no_grad():
            mine = list(DistributedSampler(range(args.test_size), shuffle=False))  # padded
            xs, ys = test_x[mine].to(device), test_y[mine].to(device)
            correct = (model(xs).argmax(1) == ys).sum()
            totals = torch.tensor([correct.item(), len(ys)], dtype=torch.float64, device=device)
        model.train()
        dist.all_reduce(totals)  # fix 2: EVERY rank joins the collective, not only rank 0
        if rank == 0:
            print(f"epoch {epoch}  loss {loss.item():.4f}  test accuracy "
                  f"{totals[0].item() / totals[1].item():.3f} over {int(totals[1].item())} samples",
                  flush=True)
        evals.append({"correct": totals[0].item(), "count": totals[1].item()})

    gathered = [None] * world_size
    mine = {"first_batches": first_batches, "evals": evals}
    dist.gather_object(mine, gathered if rank == 0 else None)
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "test_size": args.test_size, "epochs": args.epochs}, f)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
