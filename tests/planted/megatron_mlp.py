"""Notebook 12's megatron_mlp task: its planted mistakes (tests/test_12_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).
"""

REFERENCE = "solutions/megatron_mlp.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Megatron's split of one MLP block (notebook 12's reference): fc by columns, proj by rows."""
'''
MISTAKES = {
    "averaged": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12):
g averages the partial outputs (divides the sum by the world size).
"""
'''),
        ("        return total\n", "        return total / dist.get_world_size()  # their mean\n"),
    ],
    "bias_on_every_rank": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12):
proj's bias added on every rank, before the sum.
"""
'''),
        ('''\
        partial = F.linear(F.gelu(self.fc(f.apply(x))), self.proj.weight)
        return g.apply(partial) + self.proj.bias
''', '''\
        partial = self.proj(F.gelu(self.fc(f.apply(x))))  # the Linear, bias and all
        return g.apply(partial)
'''),
    ],
    "f_reduces_in_forward": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12):
f all-reduces in forward too (a sum of the same x on every rank).
"""
'''),
        ('''\
    def forward(ctx, x):
''', '''\
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
'''),
    ],
    "fc_by_rows": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12):
fc split by rows (its inputs), like proj.
"""
'''),
        ('''\
        self.fc.weight = nn.Parameter(self.fc.weight.detach().chunk(world, 0)[rank].clone())
        self.fc.bias = nn.Parameter(self.fc.bias.detach().chunk(world, 0)[rank].clone())
''', '''\
        self.fc.weight = nn.Parameter(self.fc.weight.detach().chunk(world, 1)[rank].clone())
'''),
    ],
    "g_reduces_in_backward": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12):
g all-reduces in backward as well as in forward.
"""
'''),
        ('''\
        return grad  # every rank already holds the whole output's gradient
''', '''\
        grad = grad.clone()
        dist.all_reduce(grad)  # the mirror image of forward
        return grad
'''),
    ],
    "no_f": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12):
no f: the input's gradient is never summed over the ranks.
"""
'''),
        ("        partial = F.linear(F.gelu(self.fc(f.apply(x))), self.proj.weight)\n",
         "        partial = F.linear(F.gelu(self.fc(x)), self.proj.weight)\n"),
    ],
    "proj_by_columns": [
        (DOC, '''\
"""A planted mistake in Megatron's MLP split (notebook 12):
proj split by columns (its outputs), like fc.
"""
'''),
        ('''\
        self.proj.weight = nn.Parameter(self.proj.weight.detach().chunk(world, 1)[rank].clone())
''', '''\
        self.proj.weight = nn.Parameter(self.proj.weight.detach().chunk(world, 0)[rank].clone())
'''),
    ],
}
