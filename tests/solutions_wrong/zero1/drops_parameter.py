"""A planted mistake in ZeRO-1 (notebook 11):
an even split by count, len(params) // world tensors per rank, that leaves the last ones out.
"""

import torch.distributed as dist


class MyZeRO1:
    """Built like ZeroRedundancyOptimizer: MyZeRO1(model.parameters(), optimizer_class, **kwargs).
    The model is not wrapped in DDP: after backward, p.grad is this rank's own gradient."""

    def __init__(self, params, optimizer_class, **defaults):
        self.params = list(params)
        rank, world = dist.get_rank(), dist.get_world_size()
        self.per_rank = len(self.params) // world  # the same number of tensors for each rank
        mine = self.params[rank * self.per_rank : (rank + 1) * self.per_rank]
        self.optim = optimizer_class(mine, **defaults)

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        world = dist.get_world_size()
        for p in self.params:
            if p.grad is not None:
                dist.all_reduce(p.grad)  # the sum over the ranks' batches
                p.grad /= world  # their average, as DDP's
        self.optim.step()  # my share only: the state of the others is not here
        for owner in range(world):
            for p in self.params[owner * self.per_rank : (owner + 1) * self.per_rank]:
                dist.broadcast(p.detach(), src=owner)
