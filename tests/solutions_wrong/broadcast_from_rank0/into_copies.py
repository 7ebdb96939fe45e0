"""Broadcasts into copies (clone()) and throws them away: nothing changes."""

import torch.distributed as dist


def broadcast_from_rank0(model):
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach().clone(), src=0)
