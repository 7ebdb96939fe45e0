"""Notebook 11's zero1 task: its planted mistakes (tests/test_11_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).
"""

REFERENCE = "solutions/zero1.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""ZeRO stage 1 by hand (notebook 11's reference): each rank steps its share of the parameters."""
'''
MISTAKES = {
    "drops_parameter": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
an even split by count, len(params) // world tensors per rank, that leaves the last ones out.
"""
'''),
        ('''\
        held = [0] * world  # elements given to each rank so far
        self.owner = {}
        for i in sorted(range(len(self.params)), key=lambda i: -self.params[i].numel()):
            self.owner[i] = held.index(min(held))  # largest first, to the least-loaded rank
            held[self.owner[i]] += self.params[i].numel()
        mine = [p for i, p in enumerate(self.params) if self.owner[i] == rank]
''', '''\
        self.per_rank = len(self.params) // world  # the same number of tensors for each rank
        mine = self.params[rank * self.per_rank : (rank + 1) * self.per_rank]
'''),
        ('''\
        for i, p in enumerate(self.params):
            dist.broadcast(p.detach(), src=self.owner[i])  # every rank, in the same order
''', '''\
        for owner in range(world):
            for p in self.params[owner * self.per_rank : (owner + 1) * self.per_rank]:
                dist.broadcast(p.detach(), src=owner)
'''),
    ],
    "no_broadcast": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
no broadcast after the step: each rank keeps only its own share updated.
"""
'''),
        ('''\
        for i, p in enumerate(self.params):
            dist.broadcast(p.detach(), src=self.owner[i])  # every rank, in the same order
''', ""),
    ],
    "not_averaged": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
the gradients are never all-reduced (as if DDP were there).
"""
'''),
        ('''\
        world = dist.get_world_size()
        for p in self.params:
            if p.grad is not None:
                dist.all_reduce(p.grad)  # the sum over the ranks' batches
                p.grad /= world  # their average, as DDP's
''', ""),
    ],
    "rebuilt_each_step": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
the local optimizer is built anew in every step (its state is lost).
"""
'''),
        ('''\
        self.optim = optimizer_class(mine, **defaults)
''', '''\
        self.make = lambda: optimizer_class(mine, **defaults)
        self.optim = self.make()
'''),
        ('''\
                p.grad /= world  # their average, as DDP's
''', '''\
                p.grad /= world  # their average, as DDP's
        self.optim = self.make()
'''),
    ],
    "round_robin": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
parameters dealt out in turn by index, whatever their size.
"""
'''),
        ('''\
        held = [0] * world  # elements given to each rank so far
        self.owner = {}
        for i in sorted(range(len(self.params)), key=lambda i: -self.params[i].numel()):
            self.owner[i] = held.index(min(held))  # largest first, to the least-loaded rank
            held[self.owner[i]] += self.params[i].numel()
''', '''\
        self.owner = {i: i % world for i in range(len(self.params))}  # dealt in turn
'''),
    ],
    "steps_everything": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
every rank steps every parameter (no saving).
"""
'''),
        ("        rank, world = dist.get_rank(), dist.get_world_size()\n",
         "        world = dist.get_world_size()\n"),
        ('''\
        mine = [p for i, p in enumerate(self.params) if self.owner[i] == rank]
        self.optim = optimizer_class(mine, **defaults)
''', '''\
        self.optim = optimizer_class(self.params, **defaults)  # all of them, on every rank
'''),
    ],
    "summed": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
the gradients are all-reduced but not divided by the world size.
"""
'''),
        ("        world = dist.get_world_size()\n", ""),
        ("                p.grad /= world  # their average, as DDP's\n", ""),
    ],
    "wrong_owner": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11):
every parameter is broadcast from rank 0, whoever stepped it.
"""
'''),
        ('''\
        for i, p in enumerate(self.params):
            dist.broadcast(p.detach(), src=self.owner[i])  # every rank, in the same order
''', '''\
        for p in self.params:
            dist.broadcast(p.detach(), src=0)  # rank 0 has the model
'''),
    ],
}
