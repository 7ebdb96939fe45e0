"""Notebook 09 (pitfalls in real training): every pitfall reproduced (its error text
matched), every fix green, the exercise's check accepting the reference and rejecting a
wrong answer, no process left."""

from pathlib import Path

import pytest
from conftest import ROOT, execute_notebook, processes_with

import coursekit

WRONG_SOLUTIONS = Path(__file__).parent / "solutions_wrong"
PITFALLS = ["unused", "batchnorm", "set_epoch", "uneven_size", "uneven_inputs"]


def assert_every_pitfall(r):
    for name in PITFALLS:
        assert r[f"{name}_reproduced"] is True, name
        assert r[f"{name}_fixed"] is True, name
    # a failure bounded by the process-group timeout surfaces in more than that timeout,
    # and well before the runner's own limit would have killed it (it was not killed)
    assert r["uneven_inputs_seconds"] > r["pg_timeout_s"]
    # the hand-synced statistics lie within the noise floor (one process adding the same sums
    # in every order: exact for up to 5 ranks, on any CPU), the ranks' own far above it
    assert r["batchnorm_synced_over_floor"] <= 1 and r["batchnorm_synced_over_floor_fp64"] <= 1
    assert r["batchnorm_local_mean_diff"] > 100 * r["batchnorm_floor_mean"]
    assert r["padded_evaluation_count"] > 11
    assert r["batchnorm_syncbn"] == "ran" or "GPU" in r["batchnorm_syncbn"]
    # find_unused_parameters=True: one collective more per step (the used-parameter map),
    # counted; its time compared round by round, with the spread (any of the three outcomes)
    claim = {c["text"].split(" ")[1]: c for c in r["claims"]
             if c["text"].startswith("find_unused_parameters=True ")}
    assert claim["made"]["outcome"] == "held", claim["made"]
    timing = claim["cost"]
    assert timing["figures"]["measurements"] >= 2 and timing["tie_condition"]


@pytest.mark.slow
@pytest.mark.parametrize("capability, threads", [
    ("default", 1), ("avx2", 2)])  # this machine's own kernels: the notebook's own run
def test_the_batchnorm_fix_holds_with_every_cpu_kernel(capability, threads, setup, monkeypatch):
    """The comparison the notebook makes (hand-synced statistics within the noise floor of one
    process adding the same sums in every order, the ranks' own far above it), with torch's
    default and AVX2 kernels besides this CPU's own, and 1 or 2 threads per rank."""
    if capability != "native":
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)  # the ranks inherit it
    if threads:
        monkeypatch.setenv("OMP_NUM_THREADS", str(threads))
    bn = coursekit.run_launcher(ROOT / "launchers" / "batchnorm_stats.py", [], setup=setup,
                                nproc=2, name=f"bn_{capability}_{threads}", echo=False).metrics
    if capability != "native":
        assert bn["cpu_capability"] == capability.upper()
    for r in bn["ranks"]:
        for figure in ("mean", "var", "mean_fp64", "var_fp64"):
            stat, _, dtype = figure.partition("_")
            synced = r[f"synced_{stat}_diff" + (f"_{dtype}" if dtype else "")]
            assert synced <= r[f"floor_{figure}"], figure
    assert max(r["local_mean_diff"] for r in bn["ranks"]) > \
        100 * max(r["floor_mean"] for r in bn["ranks"])


@pytest.mark.slow
def test_reference_solution_two_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")  # the kernel inherits it
    r = execute_notebook("09", tmp_path, NPROC=2)
    assert_every_pitfall(r)
    assert r["exercise_passed"] is True
    assert processes_with(str(tmp_path)) == [], "a process outlived the notebook"


@pytest.mark.slow
def test_wrong_solution_three_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", str(WRONG_SOLUTIONS))
    r = execute_notebook("09", tmp_path, NPROC=3)
    assert_every_pitfall(r)
    assert r["exercise_passed"] is False
    assert processes_with(str(tmp_path)) == [], "a process outlived the notebook"


def test_the_learners_launcher_hangs_and_is_stopped(setup, tmp_path):
    """As shipped, the exercise hangs in a collective: the process-group timeout ends it."""
    run = coursekit.run_launcher(ROOT / "launchers" / "pitfalls_exercise.py",
                                 ["--pg-timeout", 3, "--epochs", 1, "--train-size", 128],
                                 setup=setup, nproc=2, check=False, echo=False, timeout_s=90)
    timed_out = ("Timed out waiting", "Application timeout caused pair closure")  # gloo's words
    assert not run.ok and any(text in run.output for text in timed_out)
    assert processes_with(str(tmp_path)) == []
