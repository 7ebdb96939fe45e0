"""A WRONG answer of naive_ddp (a planted mistake for the tests): forgets to divide the summed
gradients by the world size.
"""

import torch.distributed as dist
import torch.nn as nn


class NaiveDDP(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        # every rank starts from rank 0's weights (and buffers), whatever its own seed made
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.detach(), src=0)  # the same memory, outside autograd

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        for p in self.module.parameters():  # each shared (tied) parameter once
            if p.requires_grad and p.grad is not None:
                dist.all_reduce(p.grad)  # the sum over the ranks, every rank waits here
