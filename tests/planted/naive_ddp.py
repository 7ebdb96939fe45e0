"""Notebook 07's naive_ddp task: its planted mistakes (tests/test_07_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).
"""

REFERENCE = "solutions/ddp_naive.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Reference solution, step 1: DDP by hand, one blocking all-reduce per gradient after backward."""
'''
MISTAKES = {
    "divide_twice": [
        (DOC, '''\
"""A WRONG answer of naive_ddp (a planted mistake for the tests): averages with ReduceOp.AVG, then
divides by the world size again.
"""
'''),
        ('''\
                dist.all_reduce(p.grad)  # the sum over the ranks, every rank waits here
''', '''\
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)  # the mean over the ranks
'''),
    ],
    "no_broadcast": [
        (DOC, '''\
"""A WRONG answer of naive_ddp (a planted mistake for the tests): never broadcasts: every rank
keeps its own initial weights.
"""
'''),
        ('''\
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.detach(), src=0)  # the same memory, outside autograd
''', ""),
    ],
    "no_buffer_broadcast": [
        (DOC, '''\
"""A WRONG answer of naive_ddp (a planted mistake for the tests): broadcasts the parameters but not
the buffers.
"""
'''),
        ("        for tensor in list(module.parameters()) + list(module.buffers()):\n",
         "        for tensor in module.parameters():\n"),
    ],
    "no_divide": [
        (DOC, '''\
"""A WRONG answer of naive_ddp (a planted mistake for the tests): forgets to divide the summed
gradients by the world size.
"""
'''),
        ("        world = dist.get_world_size()\n", ""),
        ('''\
                p.grad /= world  # DDP averages: the gradient of the mean loss over all ranks
''', ""),
    ],
    "only_others_receive": [
        (DOC, '''\
"""A WRONG answer of naive_ddp (a planted mistake for the tests): only the ranks other than 0 call
broadcast (rank 0 "has its weights already"), so they wait for a send that never comes: it hangs.
"""
'''),
        ('''\
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.detach(), src=0)  # the same memory, outside autograd
''', '''\
        if dist.get_rank() != 0:  # rank 0 has its own weights already
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor.detach(), src=0)
'''),
    ],
    "tied_weight_twice": [
        (DOC, '''\
"""A WRONG answer of naive_ddp (a planted mistake for the tests): all-reduces the tied weight twice
(named_parameters without removing duplicates).
"""
'''),
        ("        for p in self.module.parameters():  # each shared (tied) parameter once\n",
         "        for _, p in self.module.named_parameters(remove_duplicate=False):\n"),
    ],
}
