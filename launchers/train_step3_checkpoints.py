"""A real DDP training loop (notebook 04, step 3 of 6): checkpoints and resume.

    torchrun --nproc-per-node 2 launchers/train_step3_checkpoints.py --checkpoint-every 50

Data, model and options: launchers/common/ (`--help`). On GPUs, raise `--width`, `--train-size`.
"""

import argparse
import itertools
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.chain_setup import add_chain_options, glyph_splits, same_gpu_kernels
from common.devices import init_distributed
from common.glyphs import Net, lr_at
from common.rank0_log import Rank0Log
from common.run_record import StepClock, write_metrics
from nb04.scores import evaluate
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def save_checkpoint(path, model, optimizer, step):
    """Rank 0 only. Write a temp file, then rename: a reader sees the old or the new file."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # atomic on POSIX: never a half-written checkpoint.pt


def load_checkpoint(path, model, optimizer, device):
    """Every rank reads the same file, if there is one; returns the step it was saved at."""
    if not (path and os.path.exists(path)):
        return 0
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def main():
    parser = add_chain_options(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: only at the end")
    parser.add_argument("--resume", default=None, help="checkpoint to continue from, if it exists")
    parser.add_argument("--fail-at-step", type=int, default=-1, help="the last rank crashes here")
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

    start_step = load_checkpoint(args.resume, model, optimizer, device)  # 0: a new run
    train_set, test_x, test_y = glyph_splits(args)  # generated images: common/glyphs.py
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # rank's share, shuffled
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader)
    total_steps = args.epochs * steps_per_epoch
    samples_per_step = args.batch_size * world_size

    log = Rank0Log(args.out, rank, total_steps, samples_per_step, start_step)
    n_params = sum(p.numel() for p in model.parameters())
    log.print(f"{args.train_size} training images, {total_steps} steps of {samples_per_step} "
              f"samples over {world_size} rank(s); {n_params} parameters; backend {backend}")

    log.evaluated(start_step, *(evaluate(model, test_x, test_y, device) if rank == 0 else (0, 0)))
    seen, step, clock = 0, start_step, StepClock(device)  # clock: each step's time
    for epoch in range(start_step // steps_per_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same permutation on all ranks
        skip = start_step % steps_per_epoch if epoch == start_step // steps_per_epoch else 0
        for x, y in itertools.islice(loader, skip, None):  # resumed: skip the batches trained on
            seen += len(x)
            loss = F.cross_entropy(ddp_model(x.to(device)), y.to(device))
            loss.backward()  # DDP averages the gradients over all ranks during backward
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps, args)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            clock.step()
            log.step(step, loss, optimizer.param_groups[0]["lr"], clock.times[-1])
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                if rank == 0:
                    save_checkpoint(os.path.join(args.out, "checkpoint.pt"), model, optimizer, step)
                    print(f"checkpoint step {step} saved", flush=True)
                dist.barrier()  # nobody reads or moves on before the file is complete
            if step == args.fail_at_step and rank == world_size - 1:
                os._exit(13)  # a simulated crash: no exception, no cleanup, the process is gone
        scores = evaluate(model, test_x, test_y, device) if rank == 0 else (0, 0)  # rank 0 alone
        log.epoch_end(epoch, step, loss, *scores)
        clock.restart()  # evaluation time is not step time

    if rank == 0:
        save_checkpoint(os.path.join(args.out, "checkpoint.pt"), model, optimizer, step)
    log.close()
    checksum = sum(p.double().sum().item() for p in model.parameters())
    write_metrics(args.out, {"checksum": checksum, "samples_seen": seen},  # gathers: every rank
                  world_size=world_size, backend=backend, steps=step, start_step=start_step,
                  losses=log.losses, evals=log.evals, **clock.figures())
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
