"""Notebook 07: every pitfall reproduced (its error text matched), every fix green, the
exercise's check accepting the reference and rejecting a wrong answer, no process left."""

from pathlib import Path

import pytest
from conftest import ROOT, execute_notebook, processes_with

import coursekit

WRONG_SOLUTIONS = Path(__file__).parent / "solutions_wrong"
PITFALLS = ["hang", "desync", "unused", "batchnorm", "set_epoch", "uneven_size", "uneven_inputs"]


def assert_every_pitfall(r):
    for name in PITFALLS:
        assert r[f"{name}_reproduced"] is True, name
        assert r[f"{name}_fixed"] is True, name
    assert r["mismatch_detail_reproduced"] is True and r["monitored_barrier_reproduced"] is True
    assert r["printing_fixed"] is True and r["printing_console_ranks"] == 1
    assert r["printing_log_files"] >= 2 * r["nproc"]  # stdout and stderr of every rank
    # the faulthandler dumps located every rank of the hang
    assert r["hang_ranks_located"] == r["nproc"]
    # the desync shows right after the skipped batch, not at its end
    assert r["desync_first_divergent_step"] >= 0
    # a failure bounded by the process-group timeout surfaces in more than that timeout,
    # and well before the runner's own limit would have killed it (it was not killed)
    for name in ("hang", "desync", "uneven_inputs"):
        assert r[f"{name}_seconds"] > r["pg_timeout_s"]
    # the hand-synced statistics lie within the noise floor (one process adding the same sums
    # in every order: exact for up to 5 ranks, on any CPU), the ranks' own far above it
    assert r["batchnorm_synced_over_floor"] <= 1 and r["batchnorm_synced_over_floor_fp64"] <= 1
    assert r["batchnorm_local_mean_diff"] > 100 * r["batchnorm_floor_mean"]
    assert r["padded_evaluation_count"] > 11
    assert r["batchnorm_syncbn"] == "ran" or "GPU" in r["batchnorm_syncbn"]
    assert r["mismatch_plain_named_it"] is False  # without DETAIL nothing names the shapes


@pytest.mark.slow
@pytest.mark.parametrize("capability, threads", [
    ("native", None), ("default", 1), ("default", 2), ("avx2", 1), ("avx2", 2)])
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
    r = execute_notebook("07", tmp_path, NPROC=2)
    assert_every_pitfall(r)
    assert r["exercise_passed"] is True
    assert processes_with(str(tmp_path)) == [], "a process outlived the notebook"


@pytest.mark.slow
def test_wrong_solution_three_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", str(WRONG_SOLUTIONS))
    r = execute_notebook("07", tmp_path, NPROC=3)
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


def test_the_facts_the_notebook_teaches_are_this_torchs():
    """Timeouts, Join's divisor, SyncBatchNorm's collective, static_graph and the flight
    recorder's variables, as the notebook states them, checked against the installed torch."""
    import inspect
    import json
    from datetime import timedelta

    import torch
    from torch.distributed import constants
    from torch.distributed.elastic.agent.server import local_elastic_agent
    from torch.nn.modules import _functions
    from torch.nn.parallel import DistributedDataParallel as DDP

    assert constants.default_pg_timeout == timedelta(minutes=30)  # gloo
    if constants.default_pg_nccl_timeout is not None:  # a build with NCCL
        assert constants.default_pg_nccl_timeout == timedelta(minutes=10)
    hook = inspect.getsource(DDP.join_hook)
    assert 'kwargs.get("divide_by_initial_world_size", True)' in hook
    forward = inspect.getsource(_functions.SyncBatchNorm.forward)
    assert "all_gather" in forward and "torch.cat([mean, invstd, count]" in forward
    assert "static_graph" in inspect.signature(DDP.__init__).parameters
    c10d = Path(torch.__file__).parent / "include/torch/csrc/distributed/c10d"
    if c10d.is_dir():  # headers ship with the wheel
        assert '"TORCH_NCCL_DUMP_ON_TIMEOUT"' in (c10d / "ProcessGroupNCCL.hpp").read_text()
        recorder = (c10d / "FlightRecorder.hpp").read_text()
        assert '{"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 2000' in recorder
    # torchrun's agent turns on NCCL's async error handling (the watchdog ends the process)
    assert '"TORCH_NCCL_ASYNC_ERROR_HANDLING": os.getenv(' in inspect.getsource(local_elastic_agent)
    # and the notebook says so, not the old "10 minutes (the default)"
    nb = json.loads((ROOT / "notebooks" / "07_pitfalls_and_debugging.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "30 minutes with gloo and 10 with NCCL" in text
    assert "divide_by_initial_world_size=True" in text and "all-gathers" in text
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in text and "static_graph=True" in text
    assert "10 minutes (the default" not in text
