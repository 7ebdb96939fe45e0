"""Tensor parallelism (notebook 12): every rank holds a slice of each block's matrices.

    torchrun --nproc-per-node 2 launchers/tensor_parallel.py --impl hand torch

Megatron-LM's split of a transformer block over N ranks, which all see the same batch:
  attention  q, k, v split by columns (each rank computes heads/N of the heads), the output
             projection by rows (each rank's partial sums, all-reduced)
  MLP        fc split by columns, proj by rows
One all-reduce in forward after each row split, one in backward before each column split:
4 per block and step, each of batch x seq x dim values. The embeddings, norms and head stay
whole on every rank.
  --impl hand    written out: two autograd functions (Megatron's f and g) and sliced Linears
  --impl torch   the same split by torch.distributed.tensor.parallel on a device mesh
  --impl torch-linears   the plan for the Linears alone: q, k and v each turn the shared
                 input into a DTensor of their own, and each all-reduces its gradient

Every rank also trains the whole model alone on the same batches (the reference); the
launcher reports the largest differences of the losses, the first step's gradients and the
trained parameters (float64), what each rank holds and every collective of one step
(common/layout_runs.py). Options: the model's (tiny_gpt.add_model_args), --impl (one or
more: each trains in turn, in the same processes, from the same weights), --device, --out.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
import torch.nn.functional as F
from common import layout_runs, tiny_gpt
from common.devices import device_and_backend
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    parallelize_module,
)


class CopyToParallel(torch.autograd.Function):
    """Megatron's f, before a column split: forward passes x on; backward sums the input
    gradients of the ranks' column slices (each rank's is partial)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g, after a row split: forward sums the ranks' partial outputs; backward
    passes the gradient on (every rank needs all of it)."""

    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad


class RowParallelLinear(nn.Linear):
    """This rank's rows of the weight (its share of the inputs): a partial product, summed
    over the ranks, plus the bias once."""

    def forward(self, x):
        return ReduceFromParallel.apply(F.linear(x, self.weight)) + self.bias


def column_slice(linear, rank, world):
    """Keep this rank's output columns of a Linear (its rows of the weight and bias)."""
    linear.weight = nn.Parameter(linear.weight.detach().chunk(world, 0)[rank].clone())
    linear.bias = nn.Parameter(linear.bias.detach().chunk(world, 0)[rank].clone())


def row_slice(linear, rank, world):
    """This rank's input rows of a Linear (its columns of the weight), as a RowParallelLinear."""
    weight = linear.weight.detach().chunk(world, 1)[rank]
    row = RowParallelLinear(weight.shape[1], weight.shape[0], dtype=weight.dtype,
                            device=weight.device)
    with torch.no_grad():
        row.weight.copy_(weight)
        row.bias.copy_(linear.bias)
    return row


def tensor_parallel_by_hand(model, rank, world):
    """Split every block in place; returns {parameter name: the dim it was split along}."""
    split = {}
    for i, block in enumerate(model.blocks):
        for part, columns, rows in ((block.attn, ("q", "k", "v"), "proj"),
                                    (block.mlp, ("fc",), "proj")):
            part.register_forward_pre_hook(lambda module, args: (CopyToParallel.apply(args[0]),))
            name = f"blocks.{i}.{'attn' if part is block.attn else 'mlp'}"
            for column in columns:
                column_slice(getattr(part, column), rank, world)
                split |= {f"{name}.{column}.weight": 0, f"{name}.{column}.bias": 0}
            setattr(part, rows, row_slice(getattr(part, rows), rank, world))
            split[f"{name}.{rows}.weight"] = 1
    return split


def tensor_parallel_with_torch(model, mesh, one_input=True):
    """The same split as a plan: torch turns the Linears' weights into DTensors (sharded on
    the mesh) and inserts the same two all-reduces."""
    plan = {}
    for i in range(len(model.blocks)):
        if one_input:  # q, k and v share one input DTensor: one all-reduce of its gradient
            plan |= {f"blocks.{i}.attn": PrepareModuleInput(
                input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),),
                use_local_output=False)}
        plan |= {f"blocks.{i}.attn.{name}": ColwiseParallel() for name in ("q", "k", "v")}
        plan |= {f"blocks.{i}.attn.proj": RowwiseParallel(),
                 f"blocks.{i}.mlp.fc": ColwiseParallel(), f"blocks.{i}.mlp.proj": RowwiseParallel()}
    return parallelize_module(model, mesh, plan)


def train(impl, args, batches, reference, device):
    """Split a fresh copy of the model the ``impl`` way, train it, and compare it with the
    reference (common/layout_runs.py): this rank's figures, and the run's."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model, split = tiny_gpt.build_model(args).to(device), {}
    if impl == "hand":
        split = tensor_parallel_by_hand(model, rank, world_size)
    else:
        tensor_parallel_with_torch(model, init_device_mesh(device.type, (world_size,)),
                                   one_input=impl == "torch")
    if rank == 0:
        print(f"tensor parallel ({impl}): {sum(p.numel() for p in reference[1].parameters())} "
              f"parameters over {world_size} rank(s)", flush=True)

    def mine(name, full):
        """This rank's part of a reference tensor, as this layout holds it."""
        return full.chunk(world_size, split[name])[rank] if name in split else full

    group = {dist.group.WORLD.group_name: tuple(range(world_size))}
    return {"impl": impl, **layout_runs.train_and_compare(model, args, batches, reference,
                                                          device, group, mine=mine)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tiny_gpt.add_model_args(parser)
    parser.add_argument("--impl", nargs="+", choices=["hand", "torch", "torch-linears"],
                        default=["hand"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.heads % world_size:
        parser.error(f"--heads {args.heads} must be a multiple of the ranks ({world_size}): "
                     "each rank computes whole heads")
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    if rank == 0:
        print(f"{world_size} rank(s), backend {backend}", flush=True)

    # the same batches on every rank: tensor parallelism splits the model, not the data
    batches = tiny_gpt.make_batches(args)
    reference = tiny_gpt.reference_run(args, batches)  # one process: (losses, trained model)
    runs = {impl: train(impl, args, batches, reference, device) for impl in args.impl}
    layout_runs.write_metrics(args.out, {"world_size": world_size, "backend": backend,
                                         "runs": runs})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
