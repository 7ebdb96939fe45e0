"""Notebook 05's accumulation_step task: its planted mistakes (tests/test_05_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

SHARED: they were written against a plainer form of the reference: no docstring, the loss
divided on one line, zero_grad() with its default, no allreduces_k8() (the other task's answer).
"""

REFERENCE = "solutions/05_accumulation_mixed_precision_and_the_proof.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Reference solutions for notebook 05's tasks (used only when COURSE_SOLUTIONS is set)."""
'''
SHARED = [
    ('''\
    """One optimizer step over K micro-batches, the large batch's step with one all-reduce.

    The first K-1 run inside no_sync, forward and backward (DDP decides at the forward
    whether its backward all-reduces): their gradients accumulate locally. The last runs
    outside it: its backward all-reduces the accumulated sum once. Each loss is divided by
    K, so the sum is the mean over the large batch.
    """
''', ""),
    ('''\
            loss = F.cross_entropy(ddp_model(x), y)
            (loss / K).backward()
''', '''\
            (F.cross_entropy(ddp_model(x), y) / K).backward()
'''),
    ('''\
    optimizer.zero_grad(set_to_none=True)


def allreduces_k8(steps):
    """All-reduces of the two K = 8 runs, (no_sync, sync every micro-batch), from the K = 4
    runs' optimizer steps: 8 micro-batches of 4 are the same 32 samples per step, so the same
    steps. Net's gradients fit in one bucket: one all-reduce per synchronised backward. no_sync
    lets only the last micro-batch sync, once per step whatever K; syncing every micro-batch
    makes all 8 reduce."""
    return steps, 8 * steps
''', '''\
    optimizer.zero_grad()
'''),
]
MISTAKES = {
    "forward_outside_no_sync": [
        (DOC, '''\
"""Planted mistake: only the backward is inside no_sync; the forward, outside it, has
already told DDP to all-reduce (its docstring: the forward pass should be included)."""
'''),
        ('''\
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            (F.cross_entropy(ddp_model(x), y) / K).backward()
''', '''\
        loss = F.cross_entropy(ddp_model(x), y) / K
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            loss.backward()
'''),
    ],
    "no_loss_scaling": [
        (DOC, '''\
"""Planted mistake: each micro-batch's loss is not divided by K, so the accumulated gradient
is K times the large batch's mean."""
'''),
        ("            (F.cross_entropy(ddp_model(x), y) / K).backward()\n",
         "            F.cross_entropy(ddp_model(x), y).backward()\n"),
    ],
    "no_sync_never": [
        (DOC, '''\
"""Planted mistake: accumulation without no_sync: DDP all-reduces after every micro-batch,
K times the traffic for the same gradient."""
'''),
        ('''\

from contextlib import nullcontext
''', ""),
        ('''\
    for i, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            (F.cross_entropy(ddp_model(x), y) / K).backward()
''', '''\
    for x, y in micro_batches:
        (F.cross_entropy(ddp_model(x), y) / K).backward()
'''),
    ],
    "no_sync_on_every_micro_batch": [
        (DOC, '''\
"""Planted mistake: the whole loop runs inside no_sync, the last micro-batch too: no
all-reduce at all, so the ranks never average their gradients."""
'''),
        ('''\

from contextlib import nullcontext
''', ""),
        ('''\
    for i, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
''', '''\
    with ddp_model.no_sync():
        for x, y in micro_batches:
'''),
    ],
    "skips_the_last_micro_batch": [
        (DOC, '''\
"""Planted mistake, off by one: range(K - 1) drops the last micro-batch (its samples are
never trained on)."""
'''),
        ('''\
    for i, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
''', '''\
    for i in range(K - 1):
        x, y = micro_batches[i]
        with ddp_model.no_sync() if i < K - 2 else nullcontext():
'''),
    ],
    "step_every_micro_batch": [
        (DOC, '''\
"""Planted mistake: optimizer.step() inside the loop: K small steps instead of one large one."""
'''),
        ('''\
    optimizer.step()
    optimizer.zero_grad()
''', '''\
        optimizer.step()
        optimizer.zero_grad()
'''),
    ],
    "sync_on_the_first": [
        (DOC, '''\
"""Planted mistake, off by one: the micro-batch outside no_sync is the first, not the last:
one all-reduce per step, but the later micro-batches' gradients never leave their rank."""
'''),
        ("        with ddp_model.no_sync() if i < K - 1 else nullcontext():\n",
         "        with ddp_model.no_sync() if i > 0 else nullcontext():\n"),
    ],
    "zero_grad_inside_loop": [
        (DOC, '''\
"""Planted mistake: zero_grad before every micro-batch's backward erases the gradients
accumulated so far: the step sees the last micro-batch's alone."""
'''),
        ('''\
    for i, (x, y) in enumerate(micro_batches):
''', '''\
    for i, (x, y) in enumerate(micro_batches):
        optimizer.zero_grad()
'''),
        ('''\
    optimizer.step()
    optimizer.zero_grad()
''', '''\
    optimizer.step()
'''),
    ],
}
