"""How check_megatron_mlp.py (notebook 12's task) counts and words its verdict: not its lesson.

The launcher splits tiny_gpt's MLP with the learner's class on every rank and compares one
forward and backward with the whole MLP in one process (float64): that is what it checks.
Counting the split's all-reduces and turning the ranks' facts into the first problem to fix,
in the words of the notebook's NOT YET message, is done here.
"""

import torch.distributed as dist

TOLERANCE = 1e-10  # float64: another order of additions moves ~1e-16; a wrong split, far more
DIM = 12  # a hidden layer of 48: whole features for 1, 2, 3, 4 and 6 ranks


class Counter:
    """Wraps dist.all_reduce: while on, how many calls the split made."""

    def __init__(self):
        self.on, self.calls, call = False, 0, dist.all_reduce

        def counted(*args, **kwargs):
            self.calls += self.on
            return call(*args, **kwargs)
        dist.all_reduce = counted

    def take(self):
        calls, self.calls = self.calls, 0
        return calls


def largest(a, b):
    return (a - b).abs().max().item()


def problems(f, world):
    """What is wrong, in words, most telling first (an empty list: nothing)."""
    if f["fc"] != f["fc_expected"]:
        how = (": that splits fc's inputs (by rows)" if f["fc"] == [4 * DIM, DIM // world] else "")
        return [f"fc's weight is {f['fc']} on a rank, {f['fc_expected']} expected{how}. fc is "
                "split by columns: its output features, dim 0 of its weight, with its bias"]
    if f["proj"] != f["proj_expected"]:
        how = (": that splits proj's outputs (by columns)" if f["proj"] == [DIM // world, 4 * DIM]
               else "")
        return [f"proj's weight is {f['proj']} on a rank, {f['proj_expected']} expected{how}. "
                "proj is split by rows: its inputs, dim 1 of its weight"]
    found = []
    if f["forward_calls"] > 1:
        found.append(f"forward ran {f['forward_calls']} all-reduces, 1 expected: f passes x on "
                     "unchanged in forward; only g sums")
    elif f["forward_calls"] == 0:
        found.append("forward ran no all-reduce: g must sum the ranks' partial outputs")
    if f["backward_calls"] > 1:
        found.append(f"backward ran {f['backward_calls']} all-reduces, 1 expected: g's backward "
                     "passes the gradient on unchanged (every rank already holds all of it)")
    elif f["backward_calls"] == 0:
        found.append("backward ran no all-reduce: f's backward must sum the input's gradient "
                     "(each rank's comes from its own features only)")
    if f["output"] > TOLERANCE:
        if f["bias_each_rank"] <= TOLERANCE:
            found.append(f"the output holds proj's bias {world} times: every rank added it "
                         "before the sum. Add it once, after g")
        elif f["averaged"] <= TOLERANCE:
            found.append(f"the output is 1/{world} of the sum of the partial products: g sums "
                         "them, it does not average them")
        else:
            found.append(f"the output differs from one process by up to {f['output']:.2g}")
    if f["input_grad"] > TOLERANCE:
        found.append(f"the input's gradient differs from one process by up to "
                     f"{f['input_grad']:.2g}")
    if f["weight_grads"] > TOLERANCE:
        found.append(f"the weights' gradients differ from one process's (this rank's share) by "
                     f"up to {f['weight_grads']:.2g}")
    return found
