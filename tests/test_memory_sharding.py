"""The sharding calculator of notebook 11 (common.memory), as pure functions."""

import pytest
from common import memory

P = 1_000_000


def test_ddp_holds_sixteen_bytes_per_parameter_with_adam_and_bucket_views():
    held = memory.sharded_memory(P, 4, "ddp")
    assert held == {"parameters": 4 * P, "gradients": 4 * P, "optimizer": 8 * P, "activations": 0}


def test_without_bucket_views_ddp_buckets_are_a_second_copy_of_the_gradients():
    for strategy in ("ddp", "zero"):
        held = memory.sharded_memory(P, 4, strategy, bucket_view=False)
        assert held["gradients"] == 8 * P
    assert sum(memory.sharded_memory(P, 4, "ddp", bucket_view=False).values()) == 20 * P
    # no DDP buckets under sharding: the option changes nothing there
    for strategy in ("zero2", "fsdp"):
        assert (memory.sharded_memory(P, 4, strategy, bucket_view=False)
                == memory.sharded_memory(P, 4, strategy))


@pytest.mark.parametrize("devices", [2, 8])
def test_each_zero_stage_divides_one_more_kind(devices):
    total = {s: sum(memory.sharded_memory(P, devices, s).values()) for s in memory.STRATEGIES}
    assert total["ddp"] > total["zero"] > total["zero2"] > total["fsdp"]
    zero2 = memory.sharded_memory(P, devices, "zero2")
    assert zero2["parameters"] == 4 * P  # whole: gathered once, kept through backward
    assert zero2["gradients"] == pytest.approx(4 * P / devices)
    assert zero2["optimizer"] == pytest.approx(8 * P / devices)


@pytest.mark.parametrize("devices", [1, 2, 3, 8])
def test_zero_divides_the_optimizer_state_and_fsdp_everything(devices):
    ddp = memory.sharded_memory(P, devices, "ddp", activation_bytes=123)
    zero = memory.sharded_memory(P, devices, "zero", activation_bytes=123)
    fsdp = memory.sharded_memory(P, devices, "fsdp", activation_bytes=123)
    assert zero["optimizer"] == pytest.approx(ddp["optimizer"] / devices)
    assert zero["parameters"] == ddp["parameters"] and zero["gradients"] == ddp["gradients"]
    for kind in ("parameters", "gradients", "optimizer"):
        assert fsdp[kind] == pytest.approx(ddp[kind] / devices)
    assert ddp["activations"] == zero["activations"] == fsdp["activations"] == 123


def test_fsdp_adds_the_gathered_unit_only_when_there_is_something_to_gather():
    assert memory.sharded_memory(P, 4, "fsdp", unit_params=1000)["parameters"] == P + 4000
    assert memory.sharded_memory(P, 1, "fsdp", unit_params=1000)["parameters"] == 4 * P


def test_dtype_and_optimizer_change_the_bytes():
    held = memory.sharded_memory(P, 2, "ddp", dtype="bfloat16", optimizer="sgd")
    assert held["parameters"] == 2 * P and held["optimizer"] == 0


def test_max_params_that_fit_is_where_the_state_meets_the_gpu():
    gib = 2**30
    ddp = memory.max_params_that_fit(80 * gib, 8, "ddp")
    assert ddp == pytest.approx(80 * gib / 16)
    assert sum(memory.sharded_memory(ddp, 8, "ddp").values()) == pytest.approx(80 * gib)
    zero = memory.max_params_that_fit(80 * gib, 8, "zero", activation_bytes=10 * gib)
    assert zero == pytest.approx(70 * gib / (4 + 4 + 8 / 8))
    fsdp = memory.max_params_that_fit(80 * gib, 8, "fsdp", unit_fraction=0.1)
    assert sum(memory.sharded_memory(fsdp, 8, "fsdp", unit_params=0.1 * fsdp).values()) == (
        pytest.approx(80 * gib))
    assert ddp < zero < fsdp
    assert memory.max_params_that_fit(80 * gib, 8, "ddp", bucket_view=False) == (
        pytest.approx(80 * gib / 20))
    assert memory.max_params_that_fit(gib, 8, "fsdp", activation_bytes=2 * gib) == 0


def test_comm_per_step_ring_formulas():
    b = 4 * P
    assert memory.comm_per_step(P, 4, "ddp") == {"all-reduce gradients": (1.5 * b, 1)}
    zero = memory.comm_per_step(P, 4, "zero")
    assert zero["broadcast parameters"] == (0.75 * b, 4)  # the bucket view: one per rank
    per_tensor = memory.comm_per_step(P, 4, "zero", tensors=26)  # torch's default
    assert per_tensor["broadcast parameters"] == (0.75 * b, 26)
    fsdp = memory.comm_per_step(P, 4, "fsdp", units=5)
    assert sum(sent for sent, _ in fsdp.values()) == pytest.approx(3 * 0.75 * b)
    assert all(calls == 5 for _, calls in fsdp.values())
    assert all(sent == 0 for sent, _ in memory.comm_per_step(P, 1, "fsdp").values())
    zero2 = memory.comm_per_step(P, 4, "zero2", units=5)
    assert sum(sent for sent, _ in zero2.values()) == pytest.approx(1.5 * b)  # DDP's bytes


def test_fsdp_does_not_gather_the_root_again_for_backward():
    # FSDP2 leaves the root's parameters unsharded after forward (reshard_after_forward=None)
    fsdp = memory.comm_per_step(P, 4, "fsdp", units=5, root_params=P / 10)
    assert fsdp["all-gather parameters (forward)"] == (0.75 * 4 * P, 5)
    assert fsdp["all-gather parameters (backward)"] == (pytest.approx(0.9 * 0.75 * 4 * P), 4)
    assert fsdp["reduce-scatter gradients"] == (0.75 * 4 * P, 5)
    total = sum(sent for sent, _ in fsdp.values())
    ddp = sum(sent for sent, _ in memory.comm_per_step(P, 4, "ddp").values())
    assert ddp < total < 1.5 * ddp


def test_comm_seconds_is_the_alpha_beta_model():
    # an all-reduce of n bytes takes alpha + n / beta: the model must give that back
    n, alpha, beta = 4 * P, 1e-4, 1e9
    assert memory.comm_seconds(memory.comm_per_step(P, 2, "ddp"), alpha, beta, 2) == (
        pytest.approx(alpha + n / beta))
    fsdp = memory.comm_seconds(memory.comm_per_step(P, 2, "fsdp", units=1), alpha, beta, 2)
    assert fsdp == pytest.approx(3 * alpha + 1.5 * n / beta)
    assert memory.comm_seconds(memory.comm_per_step(P, 1, "ddp"), alpha, beta, 1) == 0


@pytest.mark.parametrize("call, name", [
    (lambda: memory.sharded_memory(P, 2, "zero3"), "strategy"),
    (lambda: memory.sharded_memory(P, 0, "ddp"), "devices"),
    (lambda: memory.sharded_memory(-1, 2, "ddp"), "params"),
    (lambda: memory.sharded_memory(P, 2, "ddp", dtype="int8"), "dtype"),
    (lambda: memory.max_params_that_fit(-1, 2, "ddp"), "gpu_bytes"),
    (lambda: memory.max_params_that_fit(1e9, 2, "fsdp", unit_fraction=2), "unit_fraction"),
    (lambda: memory.comm_per_step(P, 2, "ddp", units=0), "units"),
    (lambda: memory.comm_per_step(P, 2, "fsdp", root_params=2 * P), "root_params"),
    (lambda: memory.comm_seconds({}, 1e-4, 0, 2), "beta"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
