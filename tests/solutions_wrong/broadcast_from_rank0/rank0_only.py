"""Only rank 0 calls broadcast: the others never receive, and rank 0 waits for them."""

import torch.distributed as dist


def broadcast_from_rank0(model):
    if dist.get_rank() == 0:
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.detach(), src=0)
