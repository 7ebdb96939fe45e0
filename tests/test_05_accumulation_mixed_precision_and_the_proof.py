"""Notebook 05: accumulation with no_sync, mixed precision and compile, the proof; the
learner's tasks: the accumulation step (written, checked by the facts, its catalogue of
planted mistakes) and the all-reduce counts of two K = 8 runs (predicted; its planted wrong
predictions rejected with their mistakes named)."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, comparison_starting, execute_notebook
from task_kit import load_module, planted, task_checks

STEP6 = ROOT / "launchers" / "train_step6_amp_compile.py"
STEM = "05_accumulation_mixed_precision_and_the_proof"
WRONG = Path(__file__).parent / "solutions_wrong"
# every planted mistake of the accumulation step, and the words its NOT YET names it by
CATALOGUE = {
    "no_loss_scaling": "was 4x the large batch's: divide each loss by K",
    "no_sync_on_every_micro_batch": "no all-reduce at all",
    "no_sync_never": "4 all-reduces per step: no_sync never used",
    "forward_outside_no_sync": "DDP decides at the forward, which ran outside it",
    "step_every_micro_batch": "optimizer.step() ran 12 times in 3 calls",
    "zero_grad_inside_loop": "a zero_grad inside the loop erased the others",
    "sync_on_the_first": "after micro-batch(es) [1] of 4",
    "skips_the_last_micro_batch": "3 forwards per call for 4 micro-batches",
}


def solved(results):
    """Task name -> whether the run judged it solved."""
    return {t["name"]: t["outcome"] == "solved" for t in results["tasks"]}


@pytest.mark.slow
# 3 ranks, the reference answers: the browser test's run of it (conftest.RUN_ONCE_PARAMETERS)
@pytest.mark.parametrize("nproc", [3])
def test_accumulation_amp_compile_and_proof_notebook(nproc, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")  # the kernel inherits it (as the browser's)
    r = execute_notebook("05", tmp_path, NPROC=nproc)
    assert r["world_size"] == nproc
    # the reference step passes the check; the reference counts match the comm hook's
    assert solved(r) == {"accumulation_step": True, "allreduces_k8": True}
    # one bucket: one all-reduce per optimizer step, the steps the runs' cell printed
    assert r["allreduces_large_batch"] == r["accum_optimizer_steps"]
    # no_sync: K times fewer all-reduces than syncing every micro-batch (counts: exact)
    assert r["allreduces_no_sync"] == r["allreduces_large_batch"]
    assert r["allreduces_sync_every_micro_step"] == r["accum_steps"] * r["allreduces_no_sync"]
    # K = 8 micro-batches of half the samples: the same steps; no_sync's count stays, the other's
    # doubles
    assert r["k8_optimizer_steps"] == r["accum_optimizer_steps"]
    assert r["allreduces_k8_no_sync"] == r["allreduces_no_sync"]
    assert r["allreduces_k8_sync_every_micro_step"] == 2 * r["allreduces_sync_every_micro_step"]
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
    payback = [c for c in r["claims"] if c["template"].startswith("compile's first step")]
    assert len(payback) == 1
    assert (payback[0]["outcome"] == "skipped") == (compiled["outcome"] != "held")
    # the compile pitfall of this torch: DDP(nn.Sequential) compiles nothing, DDP(Net) compiles
    assert r["compiled_graphs_sequential"] == 0 and r["compiled_graphs_net"] >= 1
    assert r["compile_run_unique_graphs"] >= 1  # the timed compile run compiled something
    # the proof, in float64: the mathematics, on any CPU (expect ~1e-16)
    assert r["proof_f64_mean_diff"] < 1e-12 and r["proof_f64_sum_scaled_diff"] < 1e-12
    # float32: DDP within twice the spread of one process's summation orders (pair by pair)
    assert 0 < r["proof_fp32_floor_max"] and r["proof_fp32_ddp_vs_orders_max"] <= 2 * r[
        "proof_fp32_floor_max"]
    # the planted mistakes are real differences, far above the fp32 floor of the same run
    assert r["proof_f64_sum_unscaled_diff"] > 100 * r["proof_fp32_floor_max"]
    assert r["proof_f64_batchnorm_diff"] > 100 * r["proof_fp32_floor_max"]
    # on CPU DDP's constructor refuses SyncBatchNorm (torch/nn/parallel/distributed.py)
    assert r["proof_syncbn"] == "ran" or "only work with GPU modules" in r["proof_syncbn"]
    assert len(r["claims"]) >= 12


@pytest.mark.slow
def test_wrong_answers_through_the_whole_notebook(tmp_path, monkeypatch):
    """3 ranks (the browser's run: its launches, which the answers do not change, replay
    there; make verify runs 2 at full size), the wrong answers of solutions_wrong/nb05: both
    tasks are NOT YET and the notebook runs to its end."""
    monkeypatch.setenv("COURSE_SOLUTIONS", str(WRONG / "nb05"))
    r = execute_notebook("05", tmp_path, attendee_loop=True, NPROC=3)
    assert solved(r)["accumulation_step"] is False and solved(r)["allreduces_k8"] is False
    assert r["allreduces_sync_every_micro_step"] == r["accum_steps"] * r["allreduces_no_sync"]


def test_the_accumulation_check_names_every_planted_mistake(tmp_path):
    """The notebook's own check, in this process (a 1-rank gloo group each), on every file of
    the catalogue: each rejected with the mistake it plants, each message its own; the
    reference accepted, the learner's untouched starter not tried."""
    check = task_checks("05")["check_accumulation_step"]
    files = sorted(planted("accumulation_step", tmp_path).values())
    assert {f.stem for f in files} == set(CATALOGUE)
    messages = {}
    for path in files:
        ok, message = check(load_module(path).accumulation_step)
        assert ok is False and CATALOGUE[path.stem] in message, (path.stem, message)
        messages[path.stem] = message
    assert len(set(messages.values())) == len(CATALOGUE)
    ok, message = check(load_module(ROOT / "solutions" / f"{STEM}.py").accumulation_step)
    assert ok is True and "one all-reduce per 4 micro-batches" in message, message

    def starter(ddp_model, optimizer, micro_batches):
        raise NotImplementedError

    assert check(starter)[0] is None


# planted wrong predictions of the K = 8 runs' all-reduces (no_sync, sync every micro-batch), from
# runs of S optimizer steps (one bucket): each NOT YET, with the mistake it makes named
S = 192
K4 = {"large batch": {"allreduces": S, "steps": S}, "no_sync": {"allreduces": S, "steps": S},
      "sync every micro-batch": {"allreduces": 4 * S, "steps": S}}
K8 = {"no_sync": {"allreduces": S, "steps": S},
      "sync every micro-batch": {"allreduces": 8 * S, "steps": S}}
WRONG_COUNTS = {
    (1, 8): "those are per optimizer step",
    (2 * S, 16 * S): "the steps stay 192",
    (S // 2, 4 * S): "the steps stay 192",
    (8 * S, 8 * S): "no_sync skips the all-reduce of every micro-batch but the last",
    (2 * S, 8 * S): "no_sync's count does not grow with K",
    (S, 7 * S): "7 per step is K - 1",
    (S, 4 * S): "8 per step now, not 4",
    (S, S): "without no_sync every micro-batch's backward all-reduces",
}


def test_the_allreduce_prediction_names_every_planted_mistake(capsys):
    """The prediction cell's verdict (tasks.predict, with the lesson's why) on every planted
    wrong count: NOT YET, each naming its own mistake; the right counts solved."""
    import coursekit
    from coursekit.lessons import nb05

    tasks, measured, said = coursekit.Tasks(), (S, 8 * S), {}
    for guess, mistake in WRONG_COUNTS.items():
        why = nb05.allreduces_k8_why(guess, k4=K4, k8=K8)
        assert tasks.predict("allreduces_k8", guess, measured, why=why) is False
        shown = capsys.readouterr().out
        assert shown.startswith("NOT YET") and mistake in shown, (guess, shown)
        said[guess] = why
    assert len(set(said.values())) == len(said) - 1  # the two "steps stay" share theirs
    assert tasks.predict("allreduces_k8", measured, measured) is True
    reference = load_module(ROOT / "solutions" / f"{STEM}.py").allreduces_k8
    assert tuple(reference(S)) == measured


def test_fp16_with_a_grad_scaler_trains_on_cpu():
    """What `--amp fp16` runs on a CPU: autocast in float16 and GradScaler("cpu") (the
    launcher no longer refuses it). One step of the launcher's Net, in this process."""
    from common.glyphs import Net, make_dataset  # launchers/ is on sys.path (conftest)

    spec = importlib.util.spec_from_file_location("train_step6", STEP6)
    step6 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step6)
    assert step6.Net is Net  # the launcher trains this Net
    x, y = make_dataset(32, seed=1, classes=8)
    torch.manual_seed(0)
    model = Net(classes=8, width=8)
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
