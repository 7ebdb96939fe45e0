"""A planted mistake in Megatron's MLP split (notebook 12):
g averages the partial outputs (divides the sum by the world size).
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class f(torch.autograd.Function):
    """Before the column split: forward passes x on, backward all-reduces its gradient."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)  # each rank's input gradient comes from its features only
        return grad


class g(torch.autograd.Function):
    """After the row split: forward all-reduces the partial outputs, backward passes on."""

    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total)  # the sum of the ranks' partial products
        return total / dist.get_world_size()  # their mean

    @staticmethod
    def backward(ctx, grad):
        return grad  # every rank already holds the whole output's gradient


class ParallelMLP(nn.Module):
    """This rank's part of tiny_gpt.MLP (fc: d -> 4d, GELU, proj: 4d -> d), over world ranks."""

    def __init__(self, mlp, rank, world):
        super().__init__()
        self.fc, self.proj = mlp.fc, mlp.proj
        self.fc.weight = nn.Parameter(self.fc.weight.detach().chunk(world, 0)[rank].clone())
        self.fc.bias = nn.Parameter(self.fc.bias.detach().chunk(world, 0)[rank].clone())
        self.proj.weight = nn.Parameter(self.proj.weight.detach().chunk(world, 1)[rank].clone())

    def forward(self, x):
        partial = F.linear(F.gelu(self.fc(f.apply(x))), self.proj.weight)
        return g.apply(partial) + self.proj.bias
