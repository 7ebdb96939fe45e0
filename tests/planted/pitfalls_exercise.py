"""Notebook 09's two-bug exercise: its planted wrong fixes (tests/test_09_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).
"""

REFERENCE = "solutions/pitfalls_exercise.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Reference solution of notebook 09's exercise: both planted bugs fixed.

    torchrun --nproc-per-node 2 solutions/pitfalls_exercise.py --pg-timeout 10

It trains notebook 04's CNN for a few epochs with a DistributedSampler, and after every
epoch each rank scores its share of the test set and the shares are summed. Symptoms:
one of the bugs makes the run hang (bounded here by --pg-timeout); the other raises
nothing at all. The automatic check in the notebook runs it and says what is still wrong.
"""
'''
MISTAKES = {
    "every_rank_scores_all": [
        (DOC, '''\
"""A WRONG fix of notebook 09's exercise (for the tests): every rank scores the whole test set,
then the sums are all-reduced: each sample counted world_size times.
"""
'''),
        ('''\
            xs, ys = test_x[rank::world_size].to(device), test_y[rank::world_size].to(device)
''', '''\
            xs, ys = test_x.to(device), test_y.to(device)  # the whole test set, on every rank
'''),
    ],
    "no_all_reduce": [
        (DOC, '''\
"""A WRONG fix of notebook 09's exercise (for the tests): the hang 'fixed' by deleting the all-
reduce: each rank's evaluation counts its own share only.
"""
'''),
        ('''\
        dist.all_reduce(totals)  # fix 2: EVERY rank joins the collective, not only rank 0
''', ""),
    ],
    "only_hang_fixed": [
        (DOC, '''\
"""A WRONG fix of notebook 09's exercise (for the tests): the all-reduce moved out of `if rank
== 0:`; set_epoch still missing.
"""
'''),
        ('''\
        sampler.set_epoch(epoch)  # fix 1: a new order every epoch (else every epoch is epoch 0)
''', ""),
    ],
    "only_set_epoch_fixed": [
        (DOC, '''\
"""A WRONG fix of notebook 09's exercise (for the tests): set_epoch added; the all-reduce still
on rank 0 only.
"""
'''),
        ('''\
        dist.all_reduce(totals)  # fix 2: EVERY rank joins the collective, not only rank 0
        if rank == 0:
''', '''\
        if rank == 0:
            dist.all_reduce(totals)  # the sums over all ranks
'''),
    ],
    "padded_test_sampler": [
        (DOC, '''\
"""A WRONG fix of notebook 09's exercise (for the tests): the test shares taken from a
DistributedSampler, which pads 101 samples to 102: one sample is counted twice.
"""
'''),
        ('''\
            xs, ys = test_x[rank::world_size].to(device), test_y[rank::world_size].to(device)
''', '''\
            mine = list(DistributedSampler(range(args.test_size), shuffle=False))  # padded
            xs, ys = test_x[mine].to(device), test_y[mine].to(device)
'''),
    ],
    "set_epoch_after_the_loop": [
        (DOC, '''\
"""A WRONG fix of notebook 09's exercise (for the tests): both bugs addressed, but
set_epoch(epoch) is called after the epoch's loop, so epoch 1 repeats epoch 0's order.
"""
'''),
        ('''\
        sampler.set_epoch(epoch)  # fix 1: a new order every epoch (else every epoch is epoch 0)
''', ""),
        ('''\
            optimizer.step()
''', '''\
            optimizer.step()
        sampler.set_epoch(epoch)  # too late: the epoch's order was drawn when the loop began
'''),
    ],
}
