"""Megatron's split of one MLP block (notebook 12, you write it): fc by columns, proj by rows."""

import torch
import torch.distributed as dist  # noqa: F401 (yours to use)
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401 (yours to use)


class f(torch.autograd.Function):  # before the column split
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError("f's forward")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("f's backward")


class g(torch.autograd.Function):  # after the row split
    @staticmethod
    def forward(ctx, partial):
        raise NotImplementedError("g's forward")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("g's backward")


class ParallelMLP(nn.Module):
    """This rank's part of tiny_gpt.MLP (fc: d -> 4d, GELU, proj: 4d -> d) over world ranks."""

    def __init__(self, mlp, rank, world):
        super().__init__()
        self.fc, self.proj = mlp.fc, mlp.proj
        # TODO 1: keep my share, as new nn.Parameters: fc's output features (its weight's rows
        # and its bias: .chunk(world, 0)[rank]), proj's inputs (its weight's columns)
        raise NotImplementedError("Megatron's MLP: slice fc and proj here")

    def forward(self, x):
        # TODO 2: f, fc, GELU, proj's weight alone (F.linear), g, then proj's bias, once
        raise NotImplementedError("Megatron's MLP: the forward")
