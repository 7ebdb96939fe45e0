"""ZeRO stage 1 by hand (notebook 11, you write it): each rank steps its share of the parameters."""

import torch.distributed as dist  # noqa: F401 (yours to use)


class MyZeRO1:
    """Built like ZeroRedundancyOptimizer: MyZeRO1(model.parameters(), optimizer_class, **kwargs).
    The model is not wrapped in DDP: after backward, p.grad is this rank's own gradient."""

    def __init__(self, params, optimizer_class, **defaults):
        self.params = list(params)
        # TODO 1: give every parameter one owner rank, the shares as even in size as whole
        # tensors allow (largest first, each to the rank that holds least so far); then
        # self.optim = optimizer_class(<this rank's parameters>, **defaults)
        raise NotImplementedError("ZeRO-1: split the parameters and build self.optim here")

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        # TODO 2: average every gradient over the ranks (dist.all_reduce, / world size)
        # TODO 3: self.optim.step(): it steps (and keeps state for) this rank's share only
        # TODO 4: send every parameter from its owner: dist.broadcast(p.detach(), src=owner)
        raise NotImplementedError("ZeRO-1: average, step my share, broadcast every share")
