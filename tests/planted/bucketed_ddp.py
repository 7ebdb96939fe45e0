"""Notebook 07's bucketed_ddp task: its planted mistakes (tests/test_07_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).
"""

REFERENCE = "solutions/ddp_bucketed.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Reference solution, step 3: gradients packed in buckets, one all-reduce per bucket, in order."""
'''
MISTAKES = {
    "bucket_per_tensor": [
        (DOC, '''\
"""A WRONG answer of bucketed_ddp (a planted mistake for the tests): closes a bucket after every
parameter, whatever bucket_mb says.
"""
'''),
        ("            if size >= bucket_mb * 2**20:  # MiB, as bucket_cap_mb\n",
         "            if size > 0:  # a bucket per gradient\n"),
    ],
    "counts_in_no_sync": [
        (DOC, '''\
"""A WRONG answer of bucketed_ddp (a planted mistake for the tests): counts gradients and starts
buckets inside no_sync() too.
"""
'''),
        ('''\
        if not self.sync:
            return  # accumulating: the gradients stay local and add up in p.grad
''', ""),
    ],
    "forward_buckets": [
        (DOC, '''\
"""A WRONG answer of bucketed_ddp (a planted mistake for the tests): fills the buckets in
registration order, not backward's.
"""
'''),
        ("        for p in reversed(params):\n", "        for p in params:\n"),
    ],
    "no_copy_back": [
        (DOC, '''\
"""A WRONG answer of bucketed_ddp (a planted mistake for the tests): averages the flat buckets but
never copies them back into p.grad.
"""
'''),
        ("                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))\n", ""),
    ],
    "no_reset": [
        (DOC, '''\
"""A WRONG answer of bucketed_ddp (a planted mistake for the tests): forgets _reset() after a step:
the next step reuses old counters and handles.
"""
'''),
        ('''\
                offset += p.numel()
        self._reset()
''', '''\
                offset += p.numel()
'''),
    ],
    "one_bucket": [
        (DOC, '''\
"""A WRONG answer of bucketed_ddp (a planted mistake for the tests): keeps the starter's single
bucket of every parameter.
"""
'''),
        ('''\
        self.buckets, current, size = [], [], 0
        for p in reversed(params):
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_mb * 2**20:  # MiB, as bucket_cap_mb
                self.buckets.append(current)
                current, size = [], 0
        if current:
            self.buckets.append(current)
''', '''\
        self.buckets = [list(reversed(params))]  # one bucket: all the gradients at once
'''),
    ],
}
