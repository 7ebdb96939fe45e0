"""Notebook 05: accumulation with no_sync, mixed precision and compile, the proof."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, comparison_starting, execute_notebook

STEP6 = ROOT / "launchers" / "train_step6_amp_compile.py"


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
    # every time statement is a comparison of the runs' per-step times, with their quartiles
    for prefix in ("syncing every micro-batch took", "K = 4 micro-batches with no_sync took",
                   "bf16 autocast stepped", "torch.compile (eager) stepped"):  # SMOKE: eager
        figures = comparison_starting(r, prefix)["figures"]
        assert figures["measurements"] >= 2
        assert figures["ratio_low"] <= figures["ratio"] <= figures["ratio_high"]
    assert comparison_starting(r, "syncing every micro-batch took")["figures"]["extra"] == 3
    # the pay-back claim is made only where compile's steps were faster, skipped otherwise
    compiled = comparison_starting(r, "torch.compile (eager) stepped")
    payback = [c for c in r["claims"] if c["text"].startswith("compile's first step")]
    assert len(payback) == 1
    assert (payback[0]["outcome"] == "skipped") == (compiled["outcome"] != "held")
    # the compile pitfall of this torch: DDP(nn.Sequential) compiles nothing, DDP(Net) compiles
    assert r["compiled_graphs_sequential"] == 0 and r["compiled_graphs_net"] >= 1
    # the proof, in float64: the mathematics, on any CPU (expect ~1e-16)
    assert r["proof_f64_mean_diff"] < 1e-12 and r["proof_f64_sum_scaled_diff"] < 1e-12
    # the planted mistakes are real differences, far above the fp32 floor of the same run
    assert r["proof_f64_sum_unscaled_diff"] > 100 * r["proof_fp32_floor_max"]
    assert r["proof_f64_batchnorm_diff"] > 100 * r["proof_fp32_floor_max"]
    # on CPU DDP's constructor refuses SyncBatchNorm (torch/nn/parallel/distributed.py)
    assert r["proof_syncbn"] == "ran" or "only work with GPU modules" in r["proof_syncbn"]
    assert len(r["claims"]) >= 12


def test_fp16_with_a_grad_scaler_trains_on_cpu():
    """What `--amp fp16` runs on a CPU: autocast in float16 and GradScaler("cpu") (the
    launcher no longer refuses it). One step of the launcher's Net, in this process."""
    spec = importlib.util.spec_from_file_location("train_step6", STEP6)
    step6 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step6)
    x, y = step6.make_dataset(32, seed=1, classes=8)
    torch.manual_seed(0)
    model = step6.Net(classes=8, width=8)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with torch.autocast("cpu", dtype=torch.float16):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    assert logits.dtype == torch.float16  # the linear head ran in fp16
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**16  # no inf/NaN found: the step was taken, scale kept
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert "parser.error" not in STEP6.read_text()
