"""Notebook 06's bucket_count task: its planted mistakes (tests/test_06_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted)."""

REFERENCE = "solutions/06_dp_vs_ddp_measured.py"
LOOP = '''\
    buckets, size, limit = 0, 0, first
    for nbytes in tensor_bytes:
        size += nbytes
        if size >= limit:
            buckets, size, limit = buckets + 1, 0, cap
    return buckets + (size > 0)  # the last bucket, part full
'''
DOC = '"""Reference answers for notebook 06\'s tasks (used only when COURSE_SOLUTIONS is set).\n'


def says(what):  # the mistake's docstring: what it plants
    return (DOC, f'"""{what}\n')


MISTAKES = {
    "ceil_of_the_total": [
        says("Cuts the gradients into cap-sized pieces: ceil(G / cap), as if tensors split."),
        (LOOP, '''\
    total = sum(tensor_bytes)  # the gradients cut into cap-sized pieces
    if total <= first:
        return 1
    return 1 + -(-(total - first) // cap)
''')],
    "floor_of_the_total": [
        says("Rounds the count down: the part-full last bucket is lost."),
        (LOOP, '''\
    total = sum(tensor_bytes)
    return max(1, 1 + (total - first) // cap)
''')],
    "cap_in_bytes": [
        says("Takes bucket_cap_mb as bytes, not MiB."),
        ("        first, cap = 2**20, 25 * 2**20\n", "        first, cap = 1, 25\n"),
        ("        first = cap = int(bucket_cap_mb * 2**20)\n",
         "        first = cap = int(bucket_cap_mb)\n"),
    ],
    "never_past_the_cap": [
        says("Closes a bucket before a tensor would take it past its cap."),
        (LOOP, '''\
    buckets, size, limit = 0, 0, first
    for nbytes in tensor_bytes:
        if size and size + nbytes > limit:  # it would not fit: a new bucket
            buckets, size, limit = buckets + 1, 0, cap
        size += nbytes
    return buckets + (size > 0)
''')],
    "no_small_first_bucket": [
        says("Gives the default's first bucket 25 MiB, not 1 MiB."),
        ("        first, cap = 2**20, 25 * 2**20\n",
         "        first, cap = 25 * 2**20, 25 * 2**20\n"),
    ],
    "small_first_bucket_with_a_cap": [
        says("Keeps a 1 MiB first bucket under an explicit cap."),
        ("        first = cap = int(bucket_cap_mb * 2**20)\n",
         "        first, cap = 2**20, int(bucket_cap_mb * 2**20)\n"),
    ],
}
