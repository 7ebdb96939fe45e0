"""Reference answer for notebook 07's prediction (used only when COURSE_SOLUTIONS is set)."""

import math


def bucket_calls(race, bucket_mb=2):
    """All-reduces per step of the bucketed version at ``bucket_mb`` MiB in the race (its
    metrics ``race``): the model is race["tensors"] / 2 equal layers, a weight and a bias each,
    race["grad_mb"] MiB of gradients. Walking from the last layer, a bucket closes once it holds
    ``bucket_mb`` MiB: after ceil(bucket_mb / layer) layers; one all-reduce per bucket."""
    layers = race["tensors"] // 2
    per_bucket = math.ceil(bucket_mb / (race["grad_mb"] / layers))
    return math.ceil(layers / per_bucket)
