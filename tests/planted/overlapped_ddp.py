"""Notebook 07's overlapped_ddp task: its planted mistakes (tests/test_07_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).
"""

REFERENCE = "solutions/ddp_overlapped.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Reference solution, step 2: each gradient's all-reduce starts in backward once it exists."""
'''
MISTAKES = {
    "blocking_in_hook": [
        (DOC, '''\
"""A WRONG answer of overlapped_ddp (a planted mistake for the tests): the hook's all-reduce has no
async_op=True, so it blocks and returns None instead of a handle.
"""
'''),
        ('''\
        self.handles.append((p, dist.all_reduce(p.grad, async_op=True)))  # returns at once
''', '''\
        self.handles.append((p, dist.all_reduce(p.grad)))
'''),
    ],
    "handles_kept": [
        (DOC, '''\
"""A WRONG answer of overlapped_ddp (a planted mistake for the tests): never forgets the handles:
the next step divides the old ones again.
"""
'''),
        ("        self.handles.clear()\n", ""),
    ],
    "no_divide": [
        (DOC, '''\
"""A WRONG answer of overlapped_ddp (a planted mistake for the tests): waits, but forgets to divide
by the world size.
"""
'''),
        ('''\
        world = dist.get_world_size()
        for p, handle in self.handles:
            handle.wait()  # its sum has arrived in p.grad
            p.grad /= world
''', '''\
        for _p, handle in self.handles:
            handle.wait()  # its sum has arrived in p.grad
'''),
    ],
    "no_wait": [
        (DOC, '''\
"""A WRONG answer of overlapped_ddp (a planted mistake for the tests): never waits for the handles
before the optimizer step.
"""
'''),
        ('''\
        for p, handle in self.handles:
            handle.wait()  # its sum has arrived in p.grad
''', '''\
        for p, _handle in self.handles:
'''),
    ],
    "wait_in_hook": [
        (DOC, '''\
"""A WRONG answer of overlapped_ddp (a planted mistake for the tests): waits for each all-reduce
inside its hook: backward stalls on every one.
"""
'''),
        ('''\
        self.handles.append((p, dist.all_reduce(p.grad, async_op=True)))  # returns at once
''', '''\
        handle = dist.all_reduce(p.grad, async_op=True)
        handle.wait()  # the sum is there before backward goes on
        self.handles.append((p, handle))
'''),
    ],
}
