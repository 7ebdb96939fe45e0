"""A WRONG answer of naive_ddp (a planted mistake for the tests): all-reduces the tied weight twice
(named_parameters without removing duplicates).
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
        world = dist.get_world_size()
        for _, p in self.module.named_parameters(remove_duplicate=False):
            if p.requires_grad and p.grad is not None:
                dist.all_reduce(p.grad)  # the sum over the ranks, every rank waits here
                p.grad /= world  # DDP averages: the gradient of the mean loss over all ranks
