"""Notebook 00: versions, tier, a working all-reduce, live ranks, and the learner's two
predictions (what each rank holds after an all-reduce and after an all_gather)."""

import ast
import sys
from pathlib import Path

import pytest
from conftest import execute_notebook

import coursekit

STEM = "00_environment_check"
WRONG = Path(__file__).parent / "solutions_wrong" / "nb00"


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory):
    """The notebook with wrong predictions (the browser test runs it with the references:
    COURSE_SOLUTIONS=1), one run for both."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_SOLUTIONS", str(WRONG))  # the kernel inherits it
        return execute_notebook("00", tmp_path_factory.mktemp("nb00"), attendee_loop=True)


def test_environment_check(wrong_run):
    results = wrong_run
    assert results["ready"] is True and results["allreduce_ok"] is True
    assert results["allreduce_world_size"] == max(2, results["nproc"])
    assert results["verdict"].startswith("READY")
    # the all-reduce and the verdict are claims that held (the start-up time is only shown)
    held = {c["text"].split(" ")[0]: c["held"] for c in results["claims"]}
    assert held["All-reduce"] is True and held["READY:"] is True
    # the live ranks started, answered the %%ranks cell and were stopped (READY needs them)
    assert results["live_ranks_ok"] is True and results["live_ranks_start_seconds"] > 0
    # the kernel named "python3" is this environment's Python, not some other one on the machine
    kernel_env = Path(results["python_executable"]).parent.parent  # .venv/bin/python -> .venv
    assert kernel_env.resolve() == Path(sys.prefix).resolve()


def test_wrong_predictions_are_not_yet_and_the_references_are_what_the_ranks_held(
        wrong_run, monkeypatch):  # fmt: skip
    r = wrong_run
    monkeypatch.setenv("COURSE_SOLUTIONS", str(WRONG))
    assert [(t["name"], t["kind"], t["outcome"]) for t in r["tasks"]] == [
        ("allreduce_received", "predict", "not yet"), ("live_all_gather", "predict", "not yet")]
    tasks, measured = coursekit.Tasks(), ast.literal_eval(r["allreduce_received"])
    wrong = coursekit.answer(None, STEM, "received")(r["allreduce_world_size"])  # WRONG's
    assert tasks.predict("wrong received", wrong, measured) is False
    # the references, against what the ranks of this run printed and held
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    received = coursekit.answer(None, STEM, "received")(r["allreduce_world_size"])
    assert tasks.predict("received", received, measured) is True
    gathered = coursekit.answer(None, STEM, "gathered")
    assert tasks.predict("gathered", gathered, ast.literal_eval(r["live_gathered"])) is True


def test_gpu_memory_in_use_opens_no_cuda_context():
    """mem_get_info opens this kernel's CUDA context on each GPU it asks about, and then counts
    that context's own memory as 'in use': the notebook asks the driver (NVML) instead."""
    import nbformat

    notebook = Path(__file__).parent.parent / "notebooks" / "00_environment_check.ipynb"
    cells = nbformat.read(notebook, as_version=4).cells
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    assert "mem_get_info(" not in code
    assert "torch.cuda.device_memory_used(" in code
