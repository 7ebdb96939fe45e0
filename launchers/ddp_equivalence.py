"""The proof: DDP over N ranks with B/N samples each equals one process with the global batch B.

    torchrun --nproc-per-node 2 launchers/ddp_equivalence.py --steps 20

Every rank trains the same model, from the same seed, over the same global batches, twice:
(a) alone on the whole global batch of B samples (the single-process reference, no
communication at all), and (b) under DDP on its own slice of B/N samples. Then it compares
every parameter with torch.testing.assert_close and reports the largest difference.

Cases (SGD with momentum, the model and data of train_step*.py):
  mean        mean loss, LayerNorm: must match, within fp32 rounding (asserted)
  sum         sum loss, the same learning rate: DDP averages gradients, N times too small
  sum_scaled  sum loss, DDP's learning rate times N: matches again (asserted)
  batchnorm   mean loss, BatchNorm: each rank normalises by its own slice's statistics
  syncbn      BatchNorm converted to SyncBatchNorm: matches (asserted; NCCL on GPUs only)
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def make_dataset(n, seed, image_size=16, classes=8, noise=0.3):
    """n noisy images, each one of `classes` fixed 5x5 glyphs at a random place: (x, y)."""
    glyphs = torch.rand(classes, 5, 5, generator=torch.Generator().manual_seed(1234))
    glyphs = glyphs.round() * 2 - 1  # +1/-1 pixels: the same glyphs for every split
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(classes, (n,), generator=g)
    rows = torch.randint(image_size - 4, (n,), generator=g)
    cols = torch.randint(image_size - 4, (n,), generator=g)
    images = noise * torch.randn(n, 1, image_size, image_size, generator=g)
    for i in range(n):
        images[i, 0, rows[i] : rows[i] + 5, cols[i] : cols[i] + 5] += glyphs[labels[i]]
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
            norm_layer = nn.BatchNorm2d(c_out) if norm == "batch" else ChannelLayerNorm(c_out)
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


def train(model, batches, lr, reduction):
    """SGD with momentum over `batches`; returns the trained model."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for x, y in batches:
        loss = F.cross_entropy(model(x), y, reduction=reduction)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def run_case(name, norm, reduction, lr_factor, args, device, data, sync_bn=False):
    """Train (a) alone on global batches and (b) under DDP on this rank's slices; compare."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x, y = data
    B, b = args.batch_size * world_size, args.batch_size  # global batch, per-rank batch
    global_batches = [(x[t * B : (t + 1) * B].to(device), y[t * B : (t + 1) * B].to(device))
                      for t in range(args.steps)]
    my_slices = [(gx[rank * b : (rank + 1) * b], gy[rank * b : (rank + 1) * b])
                 for gx, gy in global_batches]
    lr = args.lr if reduction == "mean" else args.lr / B  # a sum loss is B times larger

    torch.manual_seed(0)
    single = train(Net(args.classes, args.width, norm).to(device), global_batches, lr, reduction)
    torch.manual_seed(0)  # the very same initial weights
    model = Net(args.classes, args.width, norm).to(device)
    if sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    train(ddp, my_slices, lr * lr_factor, reduction)

    pairs = list(zip(model.parameters(), single.parameters(), strict=True))
    diffs = [(p - q).abs().max().item() for p, q in pairs]
    try:
        for p, q in pairs:
            torch.testing.assert_close(p, q)  # fp32 defaults: rtol 1.3e-6, atol 1e-5
        close, why = True, ""
    except AssertionError as err:
        close, why = False, str(err).split("\n")[0]
    result = {"max_abs_diff": max(diffs), "close": close, "bitwise_equal": max(diffs) == 0.0}
    if rank == 0:
        print(f"{name:<11} max |DDP - single| = {max(diffs):.3e}  "
              f"{'EQUAL within fp32 tolerance' if close else 'DIFFERENT: ' + why}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank: B/N")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl" if world_size <= torch.cuda.device_count() else "gloo"
        # compare DDP with one process, not two GPU kernels: by default cuDNN may pick a different
        # (nondeterministic, TF32) convolution algorithm per run, which alone moves the weights
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    if rank == 0:
        print(f"global batch B = {args.batch_size * world_size} in one process, against "
              f"{world_size} rank(s) x {args.batch_size} under DDP; {args.steps} SGD steps")

    data = make_dataset(args.steps * args.batch_size * world_size, seed=1, classes=args.classes)
    cases = {
        "mean": run_case("mean", "layer", "mean", 1, args, device, data),
        "sum": run_case("sum", "layer", "sum", 1, args, device, data),
        "sum_scaled": run_case("sum_scaled", "layer", "sum", world_size, args, device, data),
        "batchnorm": run_case("batchnorm", "batch", "mean", 1, args, device, data),
    }
    try:
        cases["syncbn"] = run_case("syncbn", "batch", "mean", 1, args, device, data, sync_bn=True)
        syncbn = "ran"
    except Exception as err:  # noqa: BLE001 - on CPU SyncBatchNorm refuses: report what it says
        syncbn = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        if rank == 0:
            print(f"syncbn      could not run here: {syncbn}")

    for name in ("mean", "sum_scaled", "syncbn"):  # the cases that must match
        if name in cases:
            assert cases[name]["close"], f"{name}: DDP differs from the single process"
    gathered = [None] * world_size
    dist.gather_object(cases["mean"], gathered if rank == 0 else None)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "global_batch": args.batch_size * world_size, "steps": args.steps,
                       "cases": cases, "syncbn": syncbn}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
