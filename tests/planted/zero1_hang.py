"""Notebook 11's zero1 task: a planted mistake that hangs (tests/test_11_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

Its name is the file name the check runs (zero1.py).
"""

REFERENCE = "solutions/zero1.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""ZeRO stage 1 by hand (notebook 11's reference): each rank steps its share of the parameters."""
'''
MISTAKES = {
    "zero1": [
        (DOC, '''\
"""A planted mistake in ZeRO-1 (notebook 11) that hangs: each rank broadcasts only its own share,
so the ranks make different numbers of broadcasts."""
'''),
        ('''\
        for i, p in enumerate(self.params):
            dist.broadcast(p.detach(), src=self.owner[i])  # every rank, in the same order
''', '''\
        for p in self.optim.param_groups[0]["params"]:
            dist.broadcast(p.detach(), src=dist.get_rank())  # mine, to the others
'''),
    ],
}
