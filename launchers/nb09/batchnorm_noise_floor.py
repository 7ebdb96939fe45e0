"""Notebook 09 §2's yardstick: how close one process's BatchNorm statistics are to themselves.

batchnorm_stats.py compares the statistics the ranks synchronise by hand with one process's
over the whole batch. fp32 addition depends on the order, so the comparison needs a noise
floor: the largest difference between one process's statistics and those it gets by adding
the ranks' partial sums in every possible order. Measuring, not the lesson: the lesson is
the all-reduce of [sum, sum of squares, count] in the launcher.
"""

import torch


def sum_stats(h):
    """[sum, sum of squares, count] per channel: what the ranks add up."""
    dims = [d for d in range(h.dim()) if d != 1]  # every dimension except the channels
    count = torch.tensor([h.numel() / h.shape[1]], dtype=h.dtype, device=h.device)
    return torch.cat([h.sum(dims), (h * h).sum(dims), count])


def every_sum(parts):
    """Every result of adding `parts` with float additions, in any order and grouping."""
    if len(parts) == 1:
        yield parts[0]
        return
    first, rest = parts[0], parts[1:]
    for mask in range(2 ** len(rest) - 1):  # which of `rest` go into first's group
        left = [first] + [p for i, p in enumerate(rest) if mask >> i & 1]
        right = [p for i, p in enumerate(rest) if not mask >> i & 1]
        for a in every_sum(left):
            for b in every_sum(right):
                yield a + b


def noise_floor(conv, x, world_size, single_mean, single_var):
    """How far one process's own statistics move when it adds the same sums in other orders:
    (largest mean difference, largest variance difference) against `single_*`."""
    parts = [sum_stats(conv(chunk)) for chunk in x.chunk(world_size)]  # as each rank has it
    if world_size <= 5:
        totals = list(every_sum(parts))
    else:  # too many orders: the rings, both ways round
        rings = [parts[i:] + parts[:i] for i in range(world_size)]
        totals = [sum(r[1:], r[0]) for r in rings + [r[::-1] for r in rings]]
    totals = torch.stack(totals + [sum_stats(conv(x))])  # and the whole batch at once
    c, count = len(single_mean), totals[0, -1]
    means = totals[:, :c] / count  # the mean from every order of the sums
    squares = totals[:, c : 2 * c] / count
    # an all-reduce may add the sums in one order and the squares in another: every pair
    variances = squares[None, :, :] - means[:, None, :] * means[:, None, :]
    return diff(means, single_mean), diff(variances, single_var)


def diff(a, b):
    """The largest absolute difference of two tensors."""
    return (a - b).abs().max().item()


def print_comparison(gathered):
    """Rank 0's line per rank: its statistics' distance to one process's, and the floor."""
    for r, rec in enumerate(gathered):
        print(f"rank {r}: {rec['samples']} samples, |mean - one-process mean|: own slice "
              f"{rec['local_mean_diff']:.2e}, hand-synced {rec['synced_mean_diff']:.2e}, "
              f"noise floor {rec['floor_mean']:.2e} "
              f"(float64: {rec['synced_mean_diff_fp64']:.1e}, "
              f"floor {rec['floor_mean_fp64']:.1e})")
