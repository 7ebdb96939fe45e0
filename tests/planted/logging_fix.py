"""Notebook 08's fix of pitfall_logging.py: its planted wrong fixes (tests/test_08_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

In the strings below, each backslash of the file is written twice.
"""

REFERENCE = "solutions/pitfall_logging.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '''\
"""Reference solution of notebook 08's exercise: pitfall_logging.py, both hangs fixed.

    torchrun --nproc-per-node 2 solutions/pitfall_logging.py --log-every 2 --bad-step 3

log_metrics holds a collective, so every rank calls it (rank 0 alone prints); the stop at
a non-finite loss is decided by all ranks together (an all-reduce of a 0/1 flag, MAX), as
in notebook 08 §2's fixed desync. Every rank takes the same steps.
"""
'''
MISTAKES = {
    "every_rank_prints": [
        (DOC, '''\
"""A WRONG fix of notebook 08's exercise (for the tests): both collectives fixed, but every
rank prints the log line.
"""
'''),
        ('''\
    if dist.get_rank() == 0:  # FIX: every rank all-reduces, rank 0 alone prints
        print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)
''', '''\
    print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)
'''),
    ],
    "only_logging_fixed": [
        (DOC, '''\
"""A WRONG fix of notebook 08's exercise (for the tests): log_metrics on every rank; the stop
still decided by one rank alone (it leaves the loop, the others go on).
"""
'''),
        ('''\
        bad = torch.tensor([0.0 if torch.isfinite(loss) else 1.0], device=device)
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)  # FIX: one decision, taken by all ranks
        if bad.item():
            print(f"step {step}  a rank's loss is not finite: every rank stops\\n", end="",
                  flush=True)
''', '''\
        if not torch.isfinite(loss):
            print(f"step {step}  loss is {loss.item()}: stopping\\n", end="", flush=True)
'''),
    ],
    "only_stop_fixed": [
        (DOC, '''\
"""A WRONG fix of notebook 08's exercise (for the tests): the stop decided together;
log_metrics still called on rank 0 only.
"""
'''),
        ('''\
    """Print the loss averaged over the ranks. Every rank calls it: it holds a collective."""
''', '''\
    """Print the loss averaged over the ranks."""
'''),
        ('''\
    if dist.get_rank() == 0:  # FIX: every rank all-reduces, rank 0 alone prints
        print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)
''', '''\
    print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)
'''),
        ('''\
        if (step + 1) % args.log_every == 0:
            log_metrics(step, loss)  # FIX: on every rank, not only rank 0
''', '''\
        if rank == 0 and (step + 1) % args.log_every == 0:
            log_metrics(step, loss)
'''),
    ],
    "own_loss_logged": [
        (DOC, '''\
"""A WRONG fix of notebook 08's exercise (for the tests): the all-reduce removed from
log_metrics: rank 0 logs its own loss, not the ranks' mean.
"""
'''),
        ('''\
    """Print the loss averaged over the ranks. Every rank calls it: it holds a collective."""
    mean = loss.detach().clone()
    dist.all_reduce(mean)  # the sum over the ranks
    if dist.get_rank() == 0:  # FIX: every rank all-reduces, rank 0 alone prints
        print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)
''', '''\
    """Print the loss averaged over the ranks."""
    mean = loss.detach().clone()
    print(f"step {step}  mean loss {mean.item():.6f}", flush=True)  # no collective left
'''),
        ('''\
        if (step + 1) % args.log_every == 0:
            log_metrics(step, loss)  # FIX: on every rank, not only rank 0
''', '''\
        if rank == 0 and (step + 1) % args.log_every == 0:
            log_metrics(step, loss)
'''),
    ],
    "skip_alone": [
        (DOC, '''\
"""A WRONG fix of notebook 08's exercise (for the tests): log_metrics on every rank; the bad
batch skipped (continue) by its rank alone.
"""
'''),
        ('''\
        bad = torch.tensor([0.0 if torch.isfinite(loss) else 1.0], device=device)
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)  # FIX: one decision, taken by all ranks
        if bad.item():
            print(f"step {step}  a rank's loss is not finite: every rank stops\\n", end="",
                  flush=True)
            break
''', '''\
        if not torch.isfinite(loss):
            print(f"step {step}  loss is {loss.item()}: skipping this batch\\n", end="", flush=True)
            continue
'''),
    ],
    "stop_flag_min": [
        (DOC, '''\
"""A WRONG fix of notebook 08's exercise (for the tests): the stop flag all-reduced with MIN:
no rank stops unless every rank's loss is bad.
"""
'''),
        ('''\
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)  # FIX: one decision, taken by all ranks
''', '''\
        dist.all_reduce(bad, op=dist.ReduceOp.MIN)  # FIX: one decision, taken by all ranks
'''),
    ],
    "sum_logged": [
        (DOC, '''\
"""A WRONG fix of notebook 08's exercise (for the tests): log_metrics on every rank, but the
sum is logged, not divided by the world size.
"""
'''),
        ('''\
        print(f"step {step}  mean loss {mean.item() / dist.get_world_size():.6f}", flush=True)
''', '''\
        print(f"step {step}  mean loss {mean.item():.6f}", flush=True)
'''),
    ],
}
