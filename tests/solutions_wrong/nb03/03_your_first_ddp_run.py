"""Wrong answers for notebook 03: the ranks' own seeds survive the wrap (they do not), and a
broadcast that forgets the buffers (tests/planted/broadcast_from_rank0.py, no_buffers)."""

import torch.distributed as dist

equal_after_wrap = False


def broadcast_from_rank0(model):
    for p in model.parameters():
        dist.broadcast(p.detach(), src=0)
