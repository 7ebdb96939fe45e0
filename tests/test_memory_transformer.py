"""Notebook 12's transformer memory calculator: pure functions, checked without torch."""

import pytest
from common import memory

SHAPE = dict(hidden=128, layers=4, heads=4, seq=64, vocab=64, micro_batch=8)


def total(**layout):
    return [s["total"] for s in memory.transformer_memory(**SHAPE, **layout)]


def test_parameter_count_of_the_model():
    # 4 blocks of 12h^2 + 13h, embeddings (V + s) h, final norm 2h, head V h: notebook 12's 817,920
    assert memory.transformer_params(128, 4, 64, 64)["total"] == 817_920


def test_stages_hold_the_whole_model_between_them():
    one = memory.transformer_memory(**SHAPE)[0]
    stages = memory.transformer_memory(**SHAPE, pp=4)
    assert len(stages) == 4
    assert sum(s["parameters"] for s in stages) == one["parameters"]


def test_each_layout_divides_what_it_splits():
    one = memory.transformer_memory(**SHAPE)[0]
    zero1, zero2, zero3 = (memory.transformer_memory(**SHAPE, dp=4, zero_stage=z)[0]
                           for z in (1, 2, 3))
    assert zero1["optimizer"] == one["optimizer"] / 4 and zero1["gradients"] == one["gradients"]
    assert zero2["gradients"] == one["gradients"] / 4 and zero2["parameters"] == one["parameters"]
    assert zero3["parameters"] == one["parameters"] / 4
    tp = memory.transformer_memory(**SHAPE, tp=4)[0]
    assert one["parameters"] / 4 < tp["parameters"] < one["parameters"]  # norms, embeddings stay
    assert tp["activations"] < one["activations"]


def test_one_f_one_b_keeps_fewer_micro_batches_than_gpipe():
    gpipe = memory.transformer_memory(**SHAPE, pp=2, microbatches=8, schedule="gpipe")
    ofob = memory.transformer_memory(**SHAPE, pp=2, microbatches=8, schedule="1f1b")
    assert ofob[0]["activations"] < gpipe[0]["activations"] / 3  # 2 in flight against 8
    assert ofob[1]["activations"] < ofob[0]["activations"]  # the last stage: 1 in flight
    one = memory.transformer_memory(**SHAPE, pp=2, microbatches=1, schedule="gpipe")
    assert one == memory.transformer_memory(**SHAPE, pp=2, microbatches=1, schedule="1f1b")


def test_recomputation_keeps_only_block_inputs():
    assert total(recompute=True)[0] < total()[0]
    full, kept = (memory.transformer_memory(**SHAPE, recompute=r)[0]["activations"]
                  for r in (False, True))
    assert kept < full / 2


def test_mixed_precision_costs_sixteen_bytes_per_parameter():
    held = memory.transformer_memory(**SHAPE, dtype="bfloat16", master_weights=True)[0]
    params = memory.transformer_params(128, 4, 64, 64)["total"]
    assert held["parameters"] + held["gradients"] + held["optimizer"] == 16 * params


def test_largest_model_grows_with_sharding_and_with_the_gpu():
    gpu = 80 * 2**30
    ddp, fsdp = (memory.largest_transformer(gpu, dp=8, zero_stage=z)["params"] for z in (0, 3))
    assert 0 < ddp < fsdp
    assert memory.largest_transformer(2 * gpu, dp=8)["params"] > ddp
    assert memory.largest_transformer(1)["layers"] == 0  # nothing fits in one byte


@pytest.mark.parametrize("bad, message", [
    (dict(tp=0), "tp=0"), (dict(dtype="int8"), "dtype='int8'"),
    (dict(zero_stage=4), "zero_stage=4"), (dict(schedule="zb"), "schedule='zb'"),
    (dict(pp=5), "pp=5"), (dict(micro_batch=-1), "micro_batch=-1"),
])  # fmt: skip
def test_bad_input_names_the_parameter(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        memory.transformer_memory(**{**SHAPE, **bad})
