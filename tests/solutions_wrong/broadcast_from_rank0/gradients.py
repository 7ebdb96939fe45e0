"""Broadcasts the gradients instead of the parameters."""

import torch.distributed as dist


def broadcast_from_rank0(model):
    for p in model.parameters():
        dist.broadcast(p.grad, src=0)
