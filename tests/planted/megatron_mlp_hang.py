"""Notebook 12's megatron_mlp task: a planted mistake that hangs (tests/test_12_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

Its name is the file name the check's message quotes ("line 20 of megatron_mlp.py").
"""

REFERENCE = "solutions/megatron_mlp.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Megatron's split of one MLP block (notebook 12's reference): fc by columns, proj by rows."""
'''
MISTAKES = {
    "megatron_mlp": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12) that hangs: only rank 0 sums in g,
the other ranks wait for it in f's backward."""
'''),
        ('''\
        dist.all_reduce(total)  # the sum of the ranks' partial products
''', '''\
        if dist.get_rank() == 0:  # rank 0 collects the result
            dist.all_reduce(total)
'''),
    ],
}
