"""A planted mistake in ZeRO-1 (notebook 11):
the gradients are all-reduced but not divided by the world size.
"""

import torch.distributed as dist


class MyZeRO1:
    """Built like ZeroRedundancyOptimizer: MyZeRO1(model.parameters(), optimizer_class, **kwargs).
    The model is not wrapped in DDP: after backward, p.grad is this rank's own gradient."""

    def __init__(self, params, optimizer_class, **defaults):
        self.params = list(params)
        rank, world = dist.get_rank(), dist.get_world_size()
        held = [0] * world  # elements given to each rank so far
        self.owner = {}
        for i in sorted(range(len(self.params)), key=lambda i: -self.params[i].numel()):
            self.owner[i] = held.index(min(held))  # largest first, to the least-loaded rank
            held[self.owner[i]] += self.params[i].numel()
        mine = [p for i, p in enumerate(self.params) if self.owner[i] == rank]
        self.optim = optimizer_class(mine, **defaults)

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        for p in self.params:
            if p.grad is not None:
                dist.all_reduce(p.grad)  # the sum over the ranks' batches
        self.optim.step()  # my share only: the state of the others is not here
        for i, p in enumerate(self.params):
            dist.broadcast(p.detach(), src=self.owner[i])  # every rank, in the same order
