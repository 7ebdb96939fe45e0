"""Notebook 02's ring task: its planted mistakes (tests/test_02_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

SHARED: ring_all_reduce's docstring as the exercise gives it (launchers/ring_allreduce.py, no
chunk indices), as a learner's file has it.
"""

REFERENCE = "solutions/ring_allreduce.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Reference solution of the ring exercise of notebook 02 (launchers/ring_allreduce.py).

    torchrun --nproc-per-node 4 launchers/ring_allreduce.py --impl solutions/ring_allreduce.py

ring_all_reduce() is filled in; the rest is the exercise's own. Run it through the exercise, as
above: its check, launchers/nb02/ring_check.py, is imported from beside the launcher.
"""
'''
SHARED = [
    ('''\
    1. reduce-scatter, p - 1 steps: at step s rank r sends its chunk (r - s) % p to the right,
       receives chunk (r - s - 1) % p from the left and adds it to its own chunk.
       Afterwards rank r holds the complete sum of chunk (r + 1) % p.
    2. all-gather, p - 1 steps: at step s rank r sends chunk (r + 1 - s) % p to the right and
       receives chunk (r - s) % p from the left straight into place, overwriting its own.
''', '''\
    1. reduce-scatter, p - 1 steps: each rank sends one chunk to the right and adds the chunk
       it receives from the left into its own copy of that chunk. Afterwards each rank holds
       one chunk summed over all the ranks.
    2. all-gather, p - 1 steps: the summed chunks travel around the ring once more, each one
       received straight into its place, overwriting.
'''),
]
MISTAKES = {
    "adds_in_the_all_gather": [
        (DOC, '''\
"""A WRONG ring (a planted mistake for the tests, notebook 02): the all-gather adds what it
receives, as the reduce-scatter does.
"""
'''),
        ('''\
        exchange(chunks[(rank + 1 - step) % p], chunks[(rank - step) % p], group)
''', '''\
        incoming = torch.empty_like(chunks[(rank - step) % p])
        exchange(chunks[(rank + 1 - step) % p], incoming, group)
        chunks[(rank - step) % p].add_(incoming)
'''),
    ],
    "extra_all_gather_step": [
        (DOC, '''\
"""A WRONG ring (a planted mistake for the tests, notebook 02): right sums, but the all-gather
makes p steps.
"""
'''),
        ("    for step in range(p - 1):  # 2. all-gather\n",
         "    for step in range(p):  # 2. all-gather\n"),
    ],
    "forgets_a_chunk": [
        (DOC, '''\
"""A WRONG ring (a planted mistake for the tests, notebook 02): makes p - 2 reduce-scatter steps:
every chunk misses a rank.
"""
'''),
        ("    for step in range(p - 1):  # 1. reduce-scatter\n",
         "    for step in range(p - 2):  # 1. reduce-scatter\n"),
    ],
    "forgets_the_all_gather": [
        (DOC, '''\
"""A WRONG ring (a planted mistake for the tests, notebook 02): stops after the reduce-scatter.
"""
'''),
        ('''\
    for step in range(p - 1):  # 2. all-gather
        exchange(chunks[(rank + 1 - step) % p], chunks[(rank - step) % p], group)
''', ""),
    ],
    "gathers_the_wrong_chunk": [
        (DOC, '''\
"""A WRONG ring (a planted mistake for the tests, notebook 02): the all-gather sends and receives
the chunks one place off.
"""
'''),
        ("        exchange(chunks[(rank + 1 - step) % p], chunks[(rank - step) % p], group)\n",
         "        exchange(chunks[(rank - step) % p], chunks[(rank - step - 1) % p], group)\n"),
    ],
    "replaces_in_the_reduce_scatter": [
        (DOC, '''\
"""A WRONG ring (a planted mistake for the tests, notebook 02): the reduce-scatter receives
straight into the chunk, replacing instead of adding.
"""
'''),
        ('''\
        incoming = torch.empty_like(chunks[(rank - step - 1) % p])
        exchange(chunks[(rank - step) % p], incoming, group)
        chunks[(rank - step - 1) % p].add_(incoming)
''', '''\
        exchange(chunks[(rank - step) % p], chunks[(rank - step - 1) % p], group)
'''),
    ],
    "wrong_direction": [
        (DOC, '''\
"""A WRONG ring (a planted mistake for the tests, notebook 02): indices of a ring that turns the
other way (data from the right).
"""
'''),
        ('''\
        incoming = torch.empty_like(chunks[(rank - step - 1) % p])
        exchange(chunks[(rank - step) % p], incoming, group)
        chunks[(rank - step - 1) % p].add_(incoming)
    for step in range(p - 1):  # 2. all-gather
        exchange(chunks[(rank + 1 - step) % p], chunks[(rank - step) % p], group)
''', '''\
        incoming = torch.empty_like(chunks[(rank + step + 1) % p])
        exchange(chunks[(rank + step) % p], incoming, group)
        chunks[(rank + step + 1) % p].add_(incoming)
    for step in range(p - 1):  # 2. all-gather
        exchange(chunks[(rank - 1 + step) % p], chunks[(rank + step) % p], group)
'''),
    ],
}
