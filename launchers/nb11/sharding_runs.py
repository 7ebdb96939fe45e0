"""train_step7_sharding.py's runs (notebook 11): not its lesson, but for the checkpoint.

The launcher's lesson is `wrap` and the loop around it. Here: its command line, its data,
what each run records (rank 0 gathers every rank's counts) and metrics.json; and the
distributed checkpoint's round trip, which notebook 11's section 5 prints and explains.
"""

import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from common.glyphs import make_dataset
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import TensorDataset

from nb11.rank_memory import memory_kind


def run_options(parser):
    """The model's, the data's and the runs' options (`--help` lists their defaults)."""
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--depth", type=int, default=1, help="conv blocks of width 2W at the end")
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
    return parser


def run_data(args, dtype, device):
    """The training set (seed 1) in `dtype`, and a probe batch of 16 other images (seed 3) in
    `dtype` on `device`."""
    size = {"image_size": args.image_size, "classes": args.classes, "noise": args.noise}
    train_x, train_y = make_dataset(args.train_size, seed=1, **size)
    probe_x = make_dataset(16, seed=3, **size)[0]
    return TensorDataset(train_x.to(dtype), train_y), probe_x.to(device, dtype)


def dcp_round_trip(model, optimizer, fresh, fresh_optimizer, folder, probe_x, probe_out):
    """Save (model, optimizer) as a distributed checkpoint in `folder`, load it into `fresh`
    (a model with other weights, wrapped the same way) and `fresh_optimizer`, and return the
    largest difference of the two models' outputs on the probe batch."""
    model_state, optim_state = get_state_dict(model, optimizer)
    # every rank writes the shards it holds; one metadata file says where each piece lives
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder)
    inner = fresh.module if isinstance(fresh, DDP) else fresh
    model_state, optim_state = get_state_dict(inner, fresh_optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=folder)  # each rank reads the shards it owns
    set_state_dict(inner, fresh_optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    fresh.eval()
    with torch.no_grad():
        return (fresh(probe_x).cpu() - probe_out).abs().max().item()


def record_run(out, held, params, probe_x, probe_out, **figures):
    """A collective. Print what this rank holds (DDP: every rank; ZeRO, FSDP: rank 0's view);
    rank 0 gathers every rank's `held` and saves the trained `params` and the probe's outputs
    in `out`. Returns the run's figures for metrics.json."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if figures["strategy"] == "ddp" or rank == 0:
        print(f"rank {rank}: parameters {held['param_bytes']} B, gradients {held['grad_bytes']} "
              f"B, optimizer state {held['optimizer_bytes']} B", flush=True)
    gathered = [None] * world_size
    dist.gather_object(held, gathered if rank == 0 else None)
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        torch.save(params, os.path.join(out, "params.pt"))
        torch.save({"x": probe_x.cpu(), "out": probe_out}, os.path.join(out, "probe.pt"))
    return {"ranks": gathered, **figures}


def write_runs(out, runs, backend, device):
    """Rank 0 writes out/metrics.json: every run's figures (record_run's), by name."""
    if dist.get_rank() == 0:
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump({"world_size": dist.get_world_size(), "backend": backend, "runs": runs,
                       "memory_kind": memory_kind(device)}, f)
