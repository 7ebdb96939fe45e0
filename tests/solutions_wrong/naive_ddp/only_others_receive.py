"""A WRONG answer of naive_ddp (a planted mistake for the tests): only the ranks other than 0 call
broadcast (rank 0 "has its weights already"), so they wait for a send that never comes: it hangs.
"""

import torch.distributed as dist
import torch.nn as nn


class NaiveDDP(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        # every rank starts from rank 0's weights (and buffers), whatever its own seed made
        if dist.get_rank() != 0:  # rank 0 has its own weights already
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor.detach(), src=0)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        world = dist.get_world_size()
        for p in self.module.parameters():  # each shared (tied) parameter once
            if p.requires_grad and p.grad is not None:
                dist.all_reduce(p.grad)  # the sum over the ranks, every rank waits here
                p.grad /= world  # DDP averages: the gradient of the mean loss over all ranks
