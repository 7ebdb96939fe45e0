"""Notebook 08: DDP, ZeRO-1 and FSDP2 on the same training run; distributed checkpoint."""

import pytest
from conftest import execute_notebook


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3])
def test_sharding_notebook(nproc, tmp_path):
    r = execute_notebook("08", tmp_path, NPROC=nproc)
    assert r["world_size"] == nproc and r["backend"] == "gloo"
    # DDP: every rank holds the same whole state, and the calculator predicts it
    ddp_opt = r["ddp_optimizer_bytes_rank0"]
    assert all(r[f"ddp_optimizer_bytes_rank{k}"] == ddp_opt for k in range(nproc))
    assert ddp_opt >= 2 * r["ddp_param_bytes_rank0"]  # AdamW: two moments per parameter
    assert r["ddp_state_calculator_error"] < 0.01
    # ZeRO and FSDP2: each rank's optimizer state within 20% of DDP's / N
    for strategy in ("zero", "fsdp"):
        for k in range(nproc):
            measured = r[f"{strategy}_optimizer_bytes_rank{k}"]
            assert abs(measured / (ddp_opt / nproc) - 1) <= 0.2, (strategy, k, measured)
    assert r["optimizer_within_20pct"] is True
    # ZeRO keeps parameters and gradients whole; FSDP2 slices them too
    for k in range(nproc):
        assert r[f"zero_param_bytes_rank{k}"] == r["ddp_param_bytes_rank0"]
        assert abs(r[f"fsdp_param_bytes_rank{k}"] / (r["ddp_param_bytes_rank0"] / nproc) - 1) <= 0.2
        assert abs(r[f"fsdp_grad_bytes_rank{k}"] / (r["ddp_grad_bytes_rank0"] / nproc) - 1) <= 0.2
    # the same trained parameters, within fp32 tolerance
    assert r["zero_max_param_diff"] < 1e-5 and r["fsdp_max_param_diff"] < 1e-5
    # communication: FSDP2 sends 1.5x DDP's bytes, ZeRO-1 adds a broadcast
    assert r["fsdp_comm_bytes_per_step"] == pytest.approx(1.5 * r["ddp_comm_bytes_per_step"])
    assert r["zero_comm_bytes_per_step"] > r["ddp_comm_bytes_per_step"]
    assert r["alpha_us"] >= 0 and r["beta_GBps"] > 0
    assert r["zero_step_time_ratio"] > 0 and r["fsdp_step_time_ratio"] > 0
    # the checkpoint: sharded reload and single-process load give the same outputs
    assert r["dcp_sharded_reload_max_diff"] == 0
    assert r["dcp_single_process_max_diff"] <= 1e-5 and r["dcp_round_trip_ok"] is True
    # the calculator's extrapolation: more sharding, larger models
    assert (r["max_params_80gib_8gpus_ddp"] < r["max_params_80gib_8gpus_zero"]
            < r["max_params_80gib_8gpus_fsdp"])
