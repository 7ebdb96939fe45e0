"""Notebook 03's broadcast_from_rank0 task: its planted mistakes (tests/test_03_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

SHARED: they were written without equal_after_wrap (the other task's answer), the docstring and
the comment.
"""

REFERENCE = "solutions/03_your_first_ddp_run.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '"""Reference answers for notebook 03 (used only when COURSE_SOLUTIONS is set)."""\n'
SHARED = [
    ('''\
# DDP(model) broadcasts rank 0's parameters and buffers when it is built
# (_sync_module_states in torch/distributed/utils.py): every rank then holds rank 0's
equal_after_wrap = True

''', ""),
    ('''\
    """On every rank: make every parameter and buffer of model hold rank 0's values, in place."""
''', ""),
    ('''\
        dist.broadcast(tensor.detach(), src=0)  # rank 0 sends; the others receive in place
''', '''\
        dist.broadcast(tensor.detach(), src=0)
'''),
]
MISTAKES = {
    "all_reduce": [
        (DOC, '''\
"""Averages the ranks' values with all_reduce instead of copying rank 0's."""
'''),
        ('''\
        dist.broadcast(tensor.detach(), src=0)
''', '''\
        if tensor.is_floating_point():
            dist.all_reduce(tensor.detach())
            tensor.detach().div_(dist.get_world_size())
'''),
    ],
    "first_parameter_only": [
        (DOC, '''\
"""Broadcasts only the first parameter (the first layer's weight)."""
'''),
        ('''\
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach(), src=0)
''', '''\
    dist.broadcast(next(model.parameters()).detach(), src=0)
'''),
    ],
    "gradients": [
        (DOC, '"""Broadcasts the gradients instead of the parameters."""\n'),
        ('''\
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach(), src=0)
''', '''\
    for p in model.parameters():
        dist.broadcast(p.grad, src=0)
'''),
    ],
    "into_copies": [
        (DOC, '"""Broadcasts into copies (clone()) and throws them away: nothing changes."""\n'),
        ("        dist.broadcast(tensor.detach(), src=0)\n",
         "        dist.broadcast(tensor.detach().clone(), src=0)\n"),
    ],
    "no_buffers": [
        (DOC, '''\
"""Broadcasts the parameters but forgets the buffers (BatchNorm's running statistics)."""
'''),
        ('''\
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach(), src=0)
''', '''\
    for p in model.parameters():
        dist.broadcast(p.detach(), src=0)
'''),
    ],
    "own_rank_as_src": [
        (DOC, '''\
"""Each rank broadcasts from its own rank: every rank sends, none receives (a timeout)."""
'''),
        ("        dist.broadcast(tensor.detach(), src=0)\n",
         "        dist.broadcast(tensor.detach(), src=dist.get_rank())\n"),
    ],
    "rank0_only": [
        (DOC, '''\
"""Only rank 0 calls broadcast: the others never receive, and rank 0 waits for them."""
'''),
        ('''\
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach(), src=0)
''', '''\
    if dist.get_rank() == 0:
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.detach(), src=0)
'''),
    ],
}
