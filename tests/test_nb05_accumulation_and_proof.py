"""Notebook 05: accumulation with no_sync, mixed precision and compile, the proof."""

import pytest
from conftest import execute_notebook


@pytest.mark.slow
# 3 ranks: the browser test's run of it (conftest.RUN_ONCE_PARAMETERS); 2: make verify
@pytest.mark.parametrize("nproc", [3])
def test_accumulation_amp_compile_and_proof_notebook(nproc, tmp_path):
    r = execute_notebook("05", tmp_path, NPROC=nproc)
    assert r["world_size"] == nproc
    # no_sync: K times fewer all-reduces than syncing every micro-batch (counts: exact)
    assert r["allreduces_no_sync"] == r["allreduces_large_batch"]
    assert r["allreduces_sync_every_micro_step"] == r["accum_steps"] * r["allreduces_no_sync"]
    # every accumulation run learns (no normalisation, SGD): accuracy gained from chance
    assert r["accum_min_test_acc_gain"] > 0
    assert min(r["step_ms_fp32"], r["step_ms_bf16"], r["step_ms_compile"]) > 0
    # the compile pitfall of this torch: DDP(nn.Sequential) compiles nothing, DDP(Net) compiles
    assert r["compiled_graphs_sequential"] == 0 and r["compiled_graphs_net"] >= 1
    # the proof, in float64: the mathematics, on any CPU (expect ~1e-16)
    assert r["proof_f64_mean_diff"] < 1e-12 and r["proof_f64_sum_scaled_diff"] < 1e-12
    # the planted mistakes are real differences, far above the fp32 floor of the same run
    assert r["proof_f64_sum_unscaled_diff"] > 100 * r["proof_fp32_floor_max"]
    assert r["proof_f64_batchnorm_diff"] > 100 * r["proof_fp32_floor_max"]
    assert r["proof_syncbn"] == "ran" or "GPU" in r["proof_syncbn"]
    assert len(r["claims"]) >= 7
