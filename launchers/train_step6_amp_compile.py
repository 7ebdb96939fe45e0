"""The course's DDP training script (notebook 05, step 6 of 6): add --amp and --compile.

    torchrun --nproc-per-node 2 launchers/train_step6_amp_compile.py --epochs 4

What it trains: a compact CNN (`Net`) on a synthetic image-classification set made in
code (no download): each class is a fixed 5x5 glyph, each image a noisy copy of one
glyph at a random place. Every rank trains on its own shard of the data.

Options: `--help`. On GPUs, scale the defaults up (`--width`, `--train-size`).
"""

import argparse
import gc
import json
import math
import os
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.utils.tensorboard import SummaryWriter


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def make_dataset(n, seed, image_size=16, classes=8, noise=0.3, similar=0, label_noise=0.0):
    """n noisy images, each one of `classes` fixed 5x5 glyphs at a random place: (x, y).
    similar=K: class 2c+1's glyph is class 2c's with only K of its 25 pixels flipped;
    label_noise=p: a fraction p of the labels replaced by random classes."""
    glyphs = torch.rand(classes, 5, 5, generator=torch.Generator().manual_seed(1234))
    glyphs = glyphs.round() * 2 - 1  # +1/-1 pixels: the same glyphs for every split
    flips = torch.Generator().manual_seed(4321)
    for c in range(1, classes, 2) if similar else []:  # pairs of look-alike classes
        flip = torch.randperm(25, generator=flips)[:similar]
        glyphs[c] = glyphs[c - 1]
        glyphs[c].view(-1)[flip] *= -1
    g = torch.Generator().manual_seed(seed)  # a different seed for each split
    labels = torch.randint(classes, (n,), generator=g)
    rows = torch.randint(image_size - 4, (n,), generator=g)
    cols = torch.randint(image_size - 4, (n,), generator=g)
    images = noise * torch.randn(n, 1, image_size, image_size, generator=g)
    for i in range(n):
        images[i, 0, rows[i] : rows[i] + 5, cols[i] : cols[i] + 5] += glyphs[labels[i]]
    noisy = torch.rand(n, generator=g) < label_noise  # no draw changes the images above
    labels = torch.where(noisy, torch.randint(classes, (n,), generator=g), labels)
    return images, labels


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of each pixel (as in ConvNeXt): no batch statistics."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Net(nn.Module):
    """A compact CNN: three conv blocks, a global max-pool, a linear classifier."""

    def __init__(self, classes=8, width=16, norm="batch"):
        super().__init__()

        def block(c_in, c_out):
            norm_layer = {"batch": nn.BatchNorm2d, "layer": ChannelLayerNorm,
                          "none": lambda c: nn.Identity()}[norm](c_out)
            # no bias before BatchNorm: it subtracts each channel's mean, cancelling any bias
            conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=norm != "batch")
            return nn.Sequential(conv, norm_layer, nn.ReLU())

        self.features = nn.Sequential(
            block(1, width), nn.MaxPool2d(2), block(width, 2 * width), nn.MaxPool2d(2),
            block(2 * width, 2 * width),
        )  # fmt: skip
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        return self.head(self.features(x).amax(dim=(2, 3)))


def lr_at(step, total_steps, args):
    """Linear warmup, then cosine decay to zero: a pure function of the step (resume-safe)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, total_steps - args.warmup)
    return args.lr * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate(model, x, y, device, batch_size=512):
    """Each rank scores every world_size-th test sample; the sums are all-reduced (no padding)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x, y = x[rank::world_size], y[rank::world_size]
    for buffer in model.buffers():  # BatchNorm running stats: each rank's last forward updated
        dist.broadcast(buffer, src=0)  # its own copy; evaluate rank 0's, the ones it saves
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, loss sum, count
    model.eval()
    for i in range(0, len(x), batch_size):
        xb, yb = x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)
        logits = model(xb)
        totals[0] += (logits.argmax(1) == yb).sum()
        totals[1] += F.cross_entropy(logits, yb, reduction="sum")
        totals[2] += len(yb)
    model.train()
    dist.all_reduce(totals)  # SUM over ranks: every rank now holds the totals of the whole set
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def save_checkpoint(path, model, optimizer, step):
    """Rank 0 only. Write a temp file, then rename: a reader sees the old or the new file."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # atomic on POSIX: never a half-written checkpoint.pt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--test-size", type=int, default=1024)
    parser.add_argument("--noise", type=float, default=0.6, help="pixel noise (std)")
    parser.add_argument("--similar", type=int, default=4, help="pixels between look-alike classes")
    parser.add_argument("--label-noise", type=float, default=0.1, help="training labels only")
    parser.add_argument("--norm", choices=["batch", "layer", "none"], default="batch",
                        help="BatchNorm, LayerNorm over channels, or none")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank (micro-batch)")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--warmup", type=int, default=10, help="optimizer steps")
    parser.add_argument("--accum-steps", type=int, default=1,
                        help="K micro-batches per optimizer step (no_sync on K-1)")
    parser.add_argument("--sync-every-micro-step", action="store_true",
                        help="accumulate naively: all-reduce every micro-batch")
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                        help="SGD (momentum 0.9): steps proportional to the gradients")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: only at the end")
    parser.add_argument("--resume", default=None, help="checkpoint to continue from, if it exists")
    parser.add_argument("--fail-at-step", type=int, default=-1,
                        help="simulate a crash: the last rank exits at this step")
    parser.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                        help="autocast dtype; fp16 adds a GradScaler (on CPUs too)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the DDP model")
    parser.add_argument("--compile-backend", default="inductor",
                        help="inductor (fused kernels) or eager (graph capture only)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json and logs (rank 0)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
        # the same kernels in every run (a resumed run can then match an uninterrupted one):
        # cuDNN's default may pick another, nondeterministic or TF32, algorithm per run
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = Net(args.classes, args.width, args.norm).to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    train_model = ddp_model
    if args.compile:  # Dynamo cuts its graph where DDP's buckets end (one bucket: no cut)
        train_model = torch.compile(ddp_model, backend=args.compile_backend)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    # fp16 (CPU autocast takes it too): scale the loss up so that small gradients do not
    # round to zero in fp16; the scaler unscales them before the step, skipping it on inf/NaN
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")

    start_step = 0
    if args.resume and os.path.exists(args.resume):  # every rank reads the same file
        state = torch.load(args.resume, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = state["step"]
        if rank == 0:
            print(f"resumed from {args.resume} at step {start_step}")

    size = {"image_size": args.image_size, "classes": args.classes, "noise": args.noise,
            "similar": args.similar}
    train_x, train_y = make_dataset(args.train_size, seed=1, label_noise=args.label_noise, **size)
    test_x, test_y = make_dataset(args.test_size, seed=2, **size)  # held out: never trained on
    train_set = TensorDataset(train_x, train_y)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # rank's share, shuffled
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader) // args.accum_steps
    total_steps = args.epochs * steps_per_epoch
    samples_per_step = args.batch_size * args.accum_steps * world_size

    writer = None
    if rank == 0:  # one writer: rank 0 logs for everyone
        writer = SummaryWriter(os.path.join(args.out, "tb"), purge_step=start_step)
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{args.train_size} training images, {total_steps} steps of {samples_per_step} "
              f"samples over {world_size} rank(s); {n_params} parameters; backend {backend}; "
              f"amp {args.amp}; compile {args.compile}")
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    allreduces = 0

    def count_allreduce(state, bucket):  # DDP calls this once per gradient bucket it reduces
        nonlocal allreduces
        allreduces += 1
        return allreduce_hook(state, bucket)  # the all-reduce DDP does by default

    ddp_model.register_comm_hook(None, count_allreduce)

    test_acc, test_loss = evaluate(model, test_x, test_y, device)
    evals = [{"step": start_step, "test_acc": test_acc, "test_loss": test_loss}]
    losses, step_times, seen = [], [], 0
    step = start_step
    tick = time.perf_counter()
    for epoch in range(start_step // steps_per_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same permutation on all ranks
        first_epoch = epoch == start_step // steps_per_epoch
        skip = (start_step % steps_per_epoch) * args.accum_steps if first_epoch else 0
        for i, (x, y) in enumerate(loader):
            if i < skip:
                continue  # resuming mid-epoch: these batches were trained on before the stop
            if i >= steps_per_epoch * args.accum_steps:
                break
            seen += len(x)
            last_micro = (i + 1) % args.accum_steps == 0
            sync = last_micro or args.sync_every_micro_step
            with nullcontext() if sync else ddp_model.no_sync():  # no_sync: keep grads local
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    loss = F.cross_entropy(train_model(x.to(device)), y.to(device))
                scaler.scale(loss / args.accum_steps).backward()
            if not last_micro:
                continue
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps, args)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # GPU work is asynchronous: time it, not its launch
            now = time.perf_counter()
            step_times.append(now - tick)
            tick = now
            if rank == 0:
                losses.append(loss.item())
                if step % max(1, total_steps // 20) == 0 or step == total_steps:  # progress
                    print(f"step {step}/{total_steps}  loss {loss.item():.4f}", flush=True)
                writer.add_scalar("train/loss", loss.item(), step)
                writer.add_scalar("train/lr", optimizer.param_groups[0]["lr"], step)
                writer.add_scalar("train/samples_per_s", samples_per_step / step_times[-1], step)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                if rank == 0:
                    save_checkpoint(ckpt_path, model, optimizer, step)
                    print(f"checkpoint step {step} saved", flush=True)
                dist.barrier()  # nobody reads or moves on before the file is complete
            if step == args.fail_at_step and rank == world_size - 1:
                os._exit(13)  # a simulated crash: no exception, no cleanup, the process is gone
        test_acc, test_loss = evaluate(model, test_x, test_y, device)
        evals.append({"step": step, "test_acc": test_acc, "test_loss": test_loss})
        if rank == 0:
            writer.add_scalar("test/accuracy", test_acc, step)
            writer.add_scalar("test/loss", test_loss, step)
            print(f"epoch {epoch}  step {step}  loss {loss.item():.4f}  "
                  f"test accuracy {test_acc:.3f}  test loss {test_loss:.4f}")
        tick = time.perf_counter()  # evaluation time is not step time

    if rank == 0:
        save_checkpoint(ckpt_path, model, optimizer, step)
        writer.close()
    compiled_graphs = 0
    if args.compile:  # how many graphs Dynamo compiled: 0 would mean it compiled nothing
        from torch._dynamo.utils import counters

        compiled_graphs = counters["stats"]["unique_graphs"]
    checksum = sum(p.double().sum().item() for p in model.parameters())
    gathered = [None] * world_size
    mine = {"checksum": checksum, "samples_seen": seen}
    dist.gather_object(mine, gathered if rank == 0 else None)
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "steps": step, "start_step": start_step, "losses": losses,
                       "evals": evals, "allreduces": allreduces,
                       "step_times_s": step_times[2:] or step_times,  # first: warm-up, compile
                       "first_step_s": step_times[0] if step_times else None,
                       "amp": args.amp, "compile": args.compile,
                       "compiled_graphs": compiled_graphs}, f)
    del train_model, ddp_model  # release DDP before the process group (see ddp_first_run.py)
    gc.collect()  # torch.compile keeps DDP in a reference cycle: free it now, not at exit
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
