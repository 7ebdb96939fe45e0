"""A WRONG solution of notebook 09's exercise (for the tests): only the hang is fixed.

    torchrun --nproc-per-node 2 solutions/pitfalls_exercise.py --pg-timeout 10

It trains notebook 04's CNN for a few epochs with a DistributedSampler, and after every
epoch each rank scores its share of the test set and the shares are summed. Symptoms:
one of the bugs makes the run hang (bounded here by --pg-timeout); the other raises
nothing at all. The automatic check in the notebook runs it and says what is still wrong.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.devices import init_distributed
from common.glyphs import Net, make_dataset
from common.pitfall_harness import pitfall_parser, write_metrics
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    parser = pitfall_parser(__doc__)  # --pg-timeout, --device, --out
    parser.add_argument("--train-size", type=int, default=256)
    parser.add_argument("--test-size", type=int, default=101)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)

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
            xs, ys = test_x[rank::world_size].to(device), test_y[rank::world_size].to(device)
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
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      test_size=args.test_size, epochs=args.epochs)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
