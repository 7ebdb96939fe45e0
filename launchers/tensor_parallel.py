"""Tensor parallelism (notebook 12): every rank holds a slice of each block's matrices.

    torchrun --nproc-per-node 2 launchers/tensor_parallel.py --impl hand torch

Megatron-LM's split, by hand and as torch's plan: q, k, v and the MLP's fc by columns, each
output projection by rows; one all-reduce after each row split in forward, one before each
column split in backward. Every rank sees the same batch; each split trains beside one
process (nb12/layout_mains.py: the options, the runs, metrics.json).
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from nb12 import layout_mains
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    parallelize_module,
)


class CopyToParallel(torch.autograd.Function):
    """Megatron's f, before a column split: backward sums the ranks' partial input gradients."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g, after a row split: forward sums the ranks' partial outputs."""

    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad


class RowParallelLinear(nn.Linear):
    """This rank's share of the inputs: a partial product, summed over the ranks, + the bias."""

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
    """The same split as a plan: torch shards the weights as DTensors, adds the all-reduces."""
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


def split(impl, model, device):
    """Split ``model`` the ``impl`` way: {parameter name: the dim it was cut along}."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if impl == "hand":
        return tensor_parallel_by_hand(model, rank, world_size)
    mesh = init_device_mesh(device.type, (world_size,))  # all the ranks, one dimension
    tensor_parallel_with_torch(model, mesh, one_input=impl == "torch")
    return {}  # DTensors: the comparison gathers them whole


if __name__ == "__main__":
    layout_mains.tensor_parallel_main(__doc__, split)
