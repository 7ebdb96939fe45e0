"""Notebook 01's largest_batches task: its planted mistakes (tests/test_01_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

SHARED: they were written without memory_trend (the other task's answer).
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
]
DP_DEVICE0 = "        return weights + state + share * (act + out) + 3 * batch * out\n"
MISTAKES = {
    "dp_as_a_replica": [
        (DOC, '"""Counts DP\'s device 0 as one more replica: its share, no gathered batch."""\n'),
        (DP_DEVICE0, "        return 2 * weights + share * (act + 2 * out)  # as device 1\n"),
    ],
    "dp_split_evenly_like_ddp": [
        (DOC, '"""Assumes DataParallel splits the memory evenly over the devices, as DDP."""\n'),
        ("    return largest(dp_device0), largest(ddp_rank), \"outputs\"\n",
         "    return largest(ddp_rank), largest(ddp_rank), \"outputs\"\n"),
    ],
    "forgot_gathered_outputs": [
        (DOC, '"""Forgets the gathered copy of the outputs: their gradient and the loss\'s."""\n'),
        (DP_DEVICE0, "        return weights + state + share * (act + out) + 2 * batch * out\n"),
    ],
    "forgot_optimizer_state": [
        (DOC, '"""Forgets the optimizer state (as if the optimizer were plain SGD)."""\n'),
        ("    state = memory.OPTIMIZER_STATES[optimizer] * weights  # Adam: 2 tensors of the "
         "weights' size\n", "    state = 0\n"),
    ],
    "forgot_ddp_buckets": [
        (DOC, '"""Forgets DDP\'s gradient buckets (a second copy of the gradients)."""\n'),
        ("        return 3 * weights + state + share * (act + 3 * out)\n",
         "        return 2 * weights + state + share * (act + 3 * out)\n"),
    ],
    "ddp_batch_per_rank": [
        (DOC, '"""Returns DDP\'s batch per rank, not the global batch."""\n'),
        ('''\
    def ddp_rank(batch):  # weights, gradients, buckets (a copy of the gradients), state,
        share = math.ceil(batch / devices)  # and its own share of the batch only
''', '''\
    def ddp_rank(batch):  # weights, gradients, buckets (a copy of the gradients), state,
        share = batch  # and its own batch
'''),
    ],
    "first_that_does_not_fit": [
        (DOC, '"""Returns the first batch that does not fit (off by one)."""\n'),
        ("        return batch\n", "        return batch + 1\n"),
    ],
    "gap_is_model_state": [
        (DOC, '"""Says the model state makes the gap (a DDP rank holds more of it)."""\n'),
        ("    return largest(dp_device0), largest(ddp_rank), \"outputs\"\n",
         "    return largest(dp_device0), largest(ddp_rank), \"model state\"\n"),
    ],
}
