"""Notebook 01's largest_dp_batch task: its planted mistakes (tests/test_01_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

SHARED: they were written without memory_trend (the other task's answer) and the docstring.
"""

REFERENCE = "solutions/01_why_is_my_second_gpu_idle.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '"""Reference solutions for notebook 01 (used only when COURSE_SOLUTIONS is set)."""\n'
SHARED = [
    ('''\
# as K grows at a fixed batch: device 0 keeps the whole model state and the whole batch's
# outputs at any K (its peak stays); device 1 holds a replica and its 1/K share (it shrinks)
memory_trend = ("stays", "shrinks")

''', ""),
    ('''\
    """The largest global batch whose DataParallel step fits in gpu_bytes on every device.

    Device 0 carries the most, and its peak grows with the batch: count up until it no
    longer fits.
    """
''', ""),
]
MISTAKES = {
    "average_device": [
        (DOC, '''\
"""Checks the average device's memory instead of the fullest one's."""
'''),
        ('''\
    while max(memory.dp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:
''', '''\
    while sum(memory.dp_memory(params, batch + 1, devices, **sizes)) / devices <= gpu_bytes:
'''),
    ],
    "first_that_does_not_fit": [
        (DOC, '"""Returns the first batch that does not fit (off by one)."""\n'),
        ('''\
    batch = 0
    while max(memory.dp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:
''', '''\
    batch = 1
    while max(memory.dp_memory(params, batch, devices, **sizes)) <= gpu_bytes:
'''),
    ],
    "last_device": [
        (DOC, '"""Checks the last device (the least loaded) instead of every device."""\n'),
        ("    while max(memory.dp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:\n",
         "    while memory.dp_memory(params, batch + 1, devices, **sizes)[-1] <= gpu_bytes:\n"),
    ],
    "not_a_whole_number": [
        (DOC,
         '"""Solves for the batch as a real number: a fraction of a sample does not exist."""\n'),
        ('''\
    batch = 0
    while max(memory.dp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:
        batch += 1
    return batch
''', '''\
    base = max(memory.dp_memory(params, 1, devices, **sizes))
    per_sample = max(memory.dp_memory(params, 2, devices, **sizes)) - base
    return 1 + (gpu_bytes - base) / per_sample
'''),
    ],
    "per_device_batch": [
        (DOC, '"""Returns the batch per device, not the global batch."""\n'),
        ("    return batch\n", "    return batch // devices\n"),
    ],
    "split_evenly_like_ddp": [
        (DOC,
         '"""Assumes DataParallel splits the memory evenly over the devices, as DDP does."""\n'),
        ("    while max(memory.dp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:\n",
         "    while max(memory.ddp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:\n"),
    ],
}
