"""The proof: DDP over N ranks with B/N samples each equals one process with the global batch B.

    torchrun --nproc-per-node 2 launchers/ddp_equivalence.py --steps 20

Every rank trains the same model, from the same seed, over the same global batches, twice:
(a) alone on the whole global batch of B samples (the single-process reference, no
communication at all), and (b) under DDP on its own slice of B/N samples. Then it compares
every parameter and reports the largest difference.

The cases run in float64, where rounding is about 1e-16: what is left is the mathematics.
Cases (SGD with momentum, the model and data of train_step*.py):
  mean        mean loss, LayerNorm: equal (asserted)
  sum         sum loss, the same learning rate: DDP averages gradients, N times too small
  sum_scaled  sum loss, DDP's learning rate times N: equal again (asserted)
  batchnorm   mean loss, BatchNorm: each rank normalises by its own slice's statistics
  syncbn      BatchNorm converted to SyncBatchNorm: equal (asserted; DDP refuses it on CPU)
Then the mean case once more in float32, beside its noise floor: the same single process
trained on the same batches summed in another order (each batch in 2, 3 or 4 accumulated
parts, reversed, shuffled). DDP's fp32 sum is a reordered sum too: compare it with that floor.
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

# float64 carries 16 digits; 20 steps of this model lose a few of them to rounding (about
# 1e-15 is expected). A difference of 1e-9 would be a million times that: a real difference.
F64_EQUAL = 1e-9

def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


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


def train(model, batches, lr, reduction, chunks=1):
    """SGD with momentum over `batches`; each batch's gradient summed over `chunks` parts."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for x, y in batches:
        optimizer.zero_grad()
        for xc, yc in zip(x.chunk(chunks), y.chunk(chunks), strict=True):
            loss = F.cross_entropy(model(xc), yc, reduction=reduction)
            (loss * len(xc) / len(x) if reduction == "mean" else loss).backward()
        optimizer.step()
    return model


def max_diff(a, b):
    """Largest |a - b| over every parameter of two models."""
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(),
                                                          strict=True))  # fmt: skip


def run_case(name, norm, reduction, lr_factor, args, device, batches, sync_bn=False):
    """Train (a) alone on global batches and (b) under DDP on this rank's slices; compare."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    b = args.batch_size  # per rank; the global batch is b x world_size
    my_slices = [(gx[rank * b : (rank + 1) * b], gy[rank * b : (rank + 1) * b])
                 for gx, gy in batches]  # fmt: skip
    dtype = batches[0][0].dtype
    lr = args.lr if reduction == "mean" else args.lr / (b * world_size)  # a sum loss is B x larger

    torch.manual_seed(0)
    single = Net(args.classes, args.width, norm).to(device, dtype)
    train(single, batches, lr, reduction)
    torch.manual_seed(0)  # the very same initial weights
    model = Net(args.classes, args.width, norm).to(device, dtype)
    if sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    train(ddp, my_slices, lr * lr_factor, reduction)
    diff = max_diff(model, single)
    if rank == 0:
        print(f"{name:<11} {str(dtype).removeprefix('torch.'):<8} max |DDP - single| = {diff:.3e}")
    return {"max_abs_diff": diff, "bitwise_equal": diff == 0.0, "dtype": str(dtype)}, single


def fp32_noise_floor(args, device, batches, single):
    """How far one process moves from itself when it only sums the same batches in another
    order: each batch split into 2, 3 or 4 accumulated parts, reversed, or shuffled."""
    g = torch.Generator().manual_seed(7)
    reorderings = {f"{k} parts": (batches, k) for k in (2, 3, 4)}
    reorderings["reversed"] = ([(x.flip(0), y.flip(0)) for x, y in batches], 1)
    for i in (1, 2):
        shuffled = []
        for x, y in batches:
            order = torch.randperm(len(y), generator=g).to(device)
            shuffled.append((x[order], y[order]))
        reorderings[f"shuffled {i}"] = (shuffled, 1)
    floors = {}
    for label, (these, chunks) in reorderings.items():
        torch.manual_seed(0)
        model = train(Net(args.classes, args.width, "layer").to(device), these, args.lr, "mean",
                      chunks)  # fmt: skip
        floors[label] = max_diff(model, single)
    return floors


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
    world_size = int(os.environ["WORLD_SIZE"])
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
        # compare DDP with one process, not two GPU kernels: by default cuDNN may pick a different
        # (nondeterministic, TF32) convolution algorithm per run, which alone moves the weights
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    if rank == 0:
        print(f"global batch B = {args.batch_size * world_size} in one process, against "
              f"{world_size} rank(s) x {args.batch_size} under DDP; {args.steps} SGD steps")

    B = args.batch_size * world_size
    x, y = make_dataset(args.steps * B, seed=1, classes=args.classes)
    batches = {dtype: [(x[t * B : (t + 1) * B].to(device, dtype), y[t * B : (t + 1) * B].to(device))
                       for t in range(args.steps)] for dtype in (torch.float64, torch.float32)}
    f64 = batches[torch.float64]
    cases = {
        "mean": run_case("mean", "layer", "mean", 1, args, device, f64)[0],
        "sum": run_case("sum", "layer", "sum", 1, args, device, f64)[0],
        "sum_scaled": run_case("sum_scaled", "layer", "sum", world_size, args, device, f64)[0],
        "batchnorm": run_case("batchnorm", "batch", "mean", 1, args, device, f64)[0],
    }
    try:
        cases["syncbn"] = run_case("syncbn", "batch", "mean", 1, args, device, f64,
                                   sync_bn=True)[0]  # fmt: skip
        syncbn = "ran"
    except Exception as err:  # noqa: BLE001 - on CPU DDP refuses SyncBatchNorm: report its words
        syncbn = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        if rank == 0:
            print(f"syncbn      could not run here: {syncbn}")
    fp32, single32 = run_case("mean", "layer", "mean", 1, args, device, batches[torch.float32])
    floors = fp32_noise_floor(args, device, batches[torch.float32], single32)
    if rank == 0:
        print("fp32 noise floor: one process against itself, the same batches summed in "
              "another order: " + ", ".join(f"{k} {v:.3e}" for k, v in floors.items()))

    for name in ("mean", "sum_scaled", "syncbn"):  # the cases that must match: float64 rounding
        if name in cases:
            assert cases[name]["max_abs_diff"] < F64_EQUAL, f"{name}: DDP differs from one process"
    gathered = [None] * world_size
    dist.gather_object(cases["mean"], gathered if rank == 0 else None)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "global_batch": B, "steps": args.steps, "cases": cases, "syncbn": syncbn,
                       "f64_equal_below": F64_EQUAL, "fp32_mean": fp32, "fp32_floor": floors,
                       "cpu_capability": torch.backends.cpu.get_cpu_capability()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
