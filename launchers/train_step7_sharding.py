"""Beyond DDP (notebook 11): the same training, with the state sharded across ranks.

    torchrun --nproc-per-node 2 launchers/train_step7_sharding.py --strategy ddp fsdp

Notebook 05's training script (step 6), kept to its core (no accumulation, AMP, compile,
TensorBoard or resume, to keep the diff readable), with one new choice, --strategy (one
or more: each trains from the same seed in turn, in the same processes):
  ddp    every rank holds all parameters, gradients and optimizer state (AdamW: 2 moments)
  zero   DDP + ZeroRedundancyOptimizer: each rank keeps the optimizer state of its share
         of the parameters, steps them, and broadcasts them to the others (ZeRO stage 1)
  fsdp   FSDP2, fully_shard: parameters, gradients and optimizer state are all sharded;
         each block's parameters are all-gathered just before they are used
Each rank reports what it holds: the bytes of its parameters, gradients and optimizer
state, counted tensor by tensor (the local shards under FSDP), and its process's peak
memory (peak RSS on CPU, which is mostly the interpreter and torch itself; on GPUs
torch.cuda.max_memory_allocated, the tensors only).

Options: as step 6 (--width --image-size --classes --train-size --noise --norm
--epochs --batch-size --lr --warmup), plus
  --depth D          D extra conv blocks of width 2W: a deeper model, many equal tensors
  --strategy ddp|zero|fsdp [...]
  --dtype float32|float64 [...]   the parameters' and data's dtype: float64 for comparing
                     the strategies' trained parameters at the level of the mathematics
  --dcp DIR          the FSDP2 runs save a distributed checkpoint (torch.distributed.checkpoint)
                     under DIR, load it back into a fresh FSDP2 model, and compare
  --device cpu|cuda --out DIR   rank 0 writes DIR/metrics.json (every run's figures) and,
                     per run, DIR/<strategy>-<dtype>/params.pt (the full trained parameters)
                     and probe.pt (a probe batch and its outputs)
"""

import argparse
import copy
import json
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


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
    g = torch.Generator().manual_seed(seed)  # a different seed for each split
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
    """A compact CNN: conv blocks, a global max-pool, a linear classifier; --depth adds blocks."""

    def __init__(self, classes=8, width=16, norm="batch", depth=1):
        super().__init__()

        def block(c_in, c_out):
            norm_layer = nn.BatchNorm2d(c_out) if norm == "batch" else ChannelLayerNorm(c_out)
            # no conv bias before BatchNorm: it subtracts the mean, so the bias gets a gradient
            # of pure rounding noise, which AdamW turns into full-size random steps
            conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=norm != "batch")
            return nn.Sequential(conv, norm_layer, nn.ReLU())

        self.features = nn.Sequential(
            block(1, width), nn.MaxPool2d(2), block(width, 2 * width), nn.MaxPool2d(2),
            *[block(2 * width, 2 * width) for _ in range(depth)],
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


def wrap(model, strategy, device, lr):
    """The one place the three strategies differ: how the model and its optimizer are wrapped."""
    if strategy == "fsdp":  # shard each block, then the rest (the head) at the root
        # our ranks, on our device type (left out, FSDP2 takes a GPU whenever one exists)
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for module in model.features:
            if isinstance(module, nn.Sequential):
                fully_shard(module, mesh=mesh)  # one all-gather unit: its parameters together
        fully_shard(model, mesh=mesh)
        return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                    gradient_as_bucket_view=True)  # the gradients live in DDP's buckets
    if strategy == "zero":  # each rank keeps the AdamW state of its share of the parameters
        return ddp_model, ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr, weight_decay=0.01)
    return ddp_model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


def local_bytes(tensor):
    """Bytes this rank stores for a tensor: its own shard if it is a sharded DTensor."""
    return (tensor.to_local() if isinstance(tensor, DTensor) else tensor).nbytes


def optimizer_state_bytes(optimizer):
    """Sum of the optimizer state's tensors on this rank (AdamW: exp_avg, exp_avg_sq, step)."""
    local = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return sum(local_bytes(v) for state in local.state.values() for v in state.values()
               if torch.is_tensor(v))  # fmt: skip


def activation_bytes(model, x):
    """Bytes autograd saves for backward in one forward, parameters left out (deduplicated)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum()
    return sum(saved.values())


def full_state(model):
    """Every parameter whole, on every rank: DTensor shards are all-gathered (a collective)."""
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu().clone()
            for k, v in model.state_dict().items()}  # fmt: skip


def reset_peak_memory(device):
    """Start a new peak: the allocator's on a GPU; on Linux the process's own (VmHWM, through
    /proc/self/clear_refs), so that every run in this process has a peak of its own."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not Linux: the process's peak since it started
        pass


def peak_memory(device):
    """This process's peak: tensors on the GPU, or the whole process (RSS, in bytes) on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB, macOS bytes


def checkpoint_round_trip(model, optimizer, strategy, folder, args, device, probe_x, probe_out):
    """Save a distributed checkpoint, load it into a fresh model wrapped the same way, and
    return the largest difference of the two models' outputs on the probe batch."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder)
    torch.manual_seed(1)  # a fresh model with other weights
    fresh = Net(args.classes, args.width, args.norm, args.depth).to(device, probe_x.dtype)
    fresh, fresh_optimizer = wrap(fresh, strategy, device, args.lr)
    inner = fresh.module if isinstance(fresh, DDP) else fresh
    model_state, optim_state = get_state_dict(inner, fresh_optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=folder)  # each rank reads the shards it owns
    set_state_dict(inner, fresh_optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    fresh.eval()
    with torch.no_grad():
        return (fresh(probe_x).cpu() - probe_out).abs().max().item()


def train(strategy, dtype, args, device, out):
    """One training run from seed 0: what each rank held, its step times, the trained model."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    reset_peak_memory(device)
    memory_before = peak_memory(device)  # torch imported, process group up, no model yet
    torch.manual_seed(0)  # the same initial weights everywhere, whatever the strategy
    model = Net(args.classes, args.width, args.norm, args.depth).to(device, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    size = {"image_size": args.image_size, "classes": args.classes, "noise": args.noise}
    train_x, train_y = make_dataset(args.train_size, seed=1, **size)
    train_x = train_x.to(dtype)
    # measured on a copy, before wrapping: its forward updates BatchNorm's running statistics
    saved_bytes = activation_bytes(copy.deepcopy(model), train_x[: args.batch_size].to(device))
    train_model, optimizer = wrap(model, strategy, device, args.lr)
    # the peak from here on: the whole model and the copy above existed only before sharding
    reset_peak_memory(device)

    train_set = TensorDataset(train_x, train_y)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # rank's share, shuffled
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    total_steps = args.epochs * len(loader)
    if rank == 0:
        print(f"strategy {strategy}, {str(dtype).split('.')[1]}: {n_params} parameters, "
              f"{total_steps} steps of {args.batch_size * world_size} samples over {world_size} "
              "rank(s)", flush=True)

    losses, step_times, step = [], [], 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same permutation on all ranks
        for x, y in loader:
            tick = time.perf_counter()
            loss = F.cross_entropy(train_model(x.to(device)), y.to(device))
            loss.backward()  # DDP: all-reduce; FSDP: reduce-scatter (+ all-gathers before)
            grad_bytes = sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps, args)
            optimizer.step()  # ZeRO: step my share, then broadcast it to the other ranks
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # GPU work is asynchronous: time it, not its launch
            step_times.append(time.perf_counter() - tick)
            if rank == 0:
                losses.append(loss.item())
        if rank == 0:
            print(f"epoch {epoch}  step {step}  loss {loss.item():.4f}", flush=True)

    held = {"rank": rank, "param_bytes": sum(local_bytes(p) for p in model.parameters()),
            "grad_bytes": grad_bytes, "optimizer_bytes": optimizer_state_bytes(optimizer),
            "activation_bytes": saved_bytes, "peak_before_model": memory_before,
            "peak": peak_memory(device)}  # fmt: skip
    if strategy == "ddp" or rank == 0:  # ZeRO/FSDP: rank 0's view, DDP: every rank's
        print(f"rank {rank}: parameters {held['param_bytes']} B, gradients {grad_bytes} B, "
              f"optimizer state {held['optimizer_bytes']} B", flush=True)
    for buffer in model.buffers():  # BatchNorm running stats: each rank updated its own copy;
        dist.broadcast(buffer, src=0)  # keep rank 0's everywhere (as notebook 04 evaluates)
    params = full_state(model)  # every rank takes part in the all-gathers
    probe_x = make_dataset(16, seed=3, **size)[0].to(device, dtype)
    train_model.eval()  # BatchNorm: use the running statistics, as a deployed model does
    with torch.no_grad():
        probe_out = train_model(probe_x).cpu()

    reload_diff = None
    if args.dcp and strategy == "fsdp":  # each rank writes its own shards; nothing is gathered
        folder = os.path.join(args.dcp, os.path.basename(out))
        reload_diff = checkpoint_round_trip(model, optimizer, strategy, folder, args, device,
                                            probe_x, probe_out)
    gathered = [None] * world_size
    dist.gather_object(held, gathered if rank == 0 else None)
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        torch.save(params, os.path.join(out, "params.pt"))
        torch.save({"x": probe_x.cpu(), "out": probe_out}, os.path.join(out, "probe.pt"))
    del train_model  # release DDP before the next run and the process group (ddp_first_run.py)
    return {"ranks": gathered, "strategy": strategy, "dtype": str(dtype).split(".")[1],
            "n_params": n_params, "steps": step, "losses": losses,
            "step_times_s": step_times[2:] or step_times,  # the first steps warm up
            "dcp_reload_max_diff": reload_diff}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--norm", choices=["batch", "layer"], default="batch")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--warmup", type=int, default=10, help="optimizer steps")
    parser.add_argument("--strategy", nargs="+", choices=["ddp", "zero", "fsdp"], default=["ddp"])
    parser.add_argument("--dtype", nargs="+", choices=["float32", "float64"], default=["float32"])
    parser.add_argument("--dcp", default=None, help="folder for the FSDP2 runs' checkpoints")
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
        # the strategies are compared weight by weight: no run-to-run kernel noise (cuDNN's
        # nondeterministic, TF32 convolutions), which AdamW would grow into lr-sized steps
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    if rank == 0:
        print(f"{world_size} rank(s), backend {backend}", flush=True)

    runs = {}  # every strategy in turn, in these same processes: one start-up for them all
    for dtype in args.dtype:
        for strategy in args.strategy:
            name = f"{strategy}-{dtype}"
            runs[name] = train(strategy, getattr(torch, dtype), args, device,
                               os.path.join(args.out, name))
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "runs": runs,
                       "memory_kind": "cuda_max_allocated" if device.type == "cuda"
                       else "peak_rss"}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
