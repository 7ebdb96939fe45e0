"""A real DDP training loop (notebook 04, step 1 of 6): a model, real data, a DistributedSampler.

    torchrun --nproc-per-node 2 launchers/train_step1_data.py

Data, model and options: launchers/common/ (`--help`). On GPUs, raise `--width`, `--train-size`.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.chain_setup import add_chain_options, glyph_splits, same_gpu_kernels
from common.devices import init_distributed
from common.glyphs import Net, lr_at, make_dataset  # noqa: F401 - 08 and 09 import it here
from common.run_record import StepClock, write_metrics
from nb04.scores import evaluate
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def main():
    parser = add_chain_options(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    if device.type == "cuda":
        same_gpu_kernels()  # no autotuned cuDNN, no TF32: a resumed run can match
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = Net(args.classes, args.width, args.norm).to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    train_set, test_x, test_y = glyph_splits(args)  # generated images: common/glyphs.py
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # rank's share, shuffled
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader)
    total_steps = args.epochs * steps_per_epoch
    samples_per_step = args.batch_size * world_size

    if rank == 0:  # rank 0 prints for everyone
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{args.train_size} training images, {total_steps} steps of {samples_per_step} "
              f"samples over {world_size} rank(s); {n_params} parameters; backend {backend}")

    test_acc, test_loss = evaluate(model, test_x, test_y, device) if rank == 0 else (0, 0)
    evals = [{"step": 0, "test_acc": test_acc, "test_loss": test_loss}]
    losses, seen, step, clock = [], 0, 0, StepClock(device)  # clock: each step's time
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same permutation on all ranks
        for x, y in loader:
            seen += len(x)
            loss = F.cross_entropy(ddp_model(x.to(device)), y.to(device))
            loss.backward()  # DDP averages the gradients over all ranks during backward
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps, args)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            clock.step()
            if rank == 0:
                losses.append(loss.item())
                if step % max(1, total_steps // 20) == 0 or step == total_steps:  # progress
                    print(f"step {step}/{total_steps}  loss {loss.item():.4f}", flush=True)
        test_acc, test_loss = evaluate(model, test_x, test_y, device) if rank == 0 else (0, 0)
        evals.append({"step": step, "test_acc": test_acc, "test_loss": test_loss})
        if rank == 0:
            print(f"epoch {epoch}  step {step}  loss {loss.item():.4f}  "
                  f"test accuracy {test_acc:.3f}  test loss {test_loss:.4f}")
        clock.restart()  # evaluation time is not step time

    if rank == 0:
        torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))  # the final weights
    checksum = sum(p.double().sum().item() for p in model.parameters())
    write_metrics(args.out, {"checksum": checksum, "samples_seen": seen},  # gathers: every rank
                  world_size=world_size, backend=backend, steps=step, losses=losses,
                  evals=evals, **clock.figures())
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
