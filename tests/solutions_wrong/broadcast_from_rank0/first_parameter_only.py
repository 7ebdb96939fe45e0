"""Broadcasts only the first parameter (the first layer's weight)."""

import torch.distributed as dist


def broadcast_from_rank0(model):
    dist.broadcast(next(model.parameters()).detach(), src=0)
