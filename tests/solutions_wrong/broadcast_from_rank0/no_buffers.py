"""Broadcasts the parameters but forgets the buffers (BatchNorm's running statistics)."""

import torch.distributed as dist


def broadcast_from_rank0(model):
    for p in model.parameters():
        dist.broadcast(p.detach(), src=0)
