"""Notebook 03: the first DDP run, with 1, 2 (the CPU default) and 3 ranks, in both forms; the
learner's tasks (the prediction about DDP's first broadcast, and that broadcast written by hand)
solved, not yet, and every planted mistake of the written one named."""

from pathlib import Path

import pytest
from conftest import execute_notebook
from task_kit import load_module, planted, task_checks

WRONG = Path(__file__).parent / "solutions_wrong"
SOLUTIONS = Path(__file__).parent.parent / "solutions"
# each planted mistake, and what the check's NOT YET must name
MISTAKES = {
    "own_rank_as_src": "different sources",
    "gradients": "you broadcast the gradients",
    "first_parameter_only": "not only the first",
    "all_reduce": "you called all_reduce",
    "no_buffers": "the buffers are not",
    "into_copies": "you broadcast into copies",
    "rank0_only": "different numbers of collective calls",
}


# 3 ranks: the browser test's run of it (conftest.RUN_ONCE_PARAMETERS), with the reference
# solutions; 1 rank: the planted wrong answers; 2: make verify (unsolved)
@pytest.mark.parametrize("nproc", [3, 1])
def test_first_ddp_run(nproc, tmp_path, monkeypatch):
    if nproc == 3:  # the kernel inherits it
        monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    else:
        monkeypatch.setenv("COURSE_SOLUTIONS", str(WRONG / "nb03"))
    results = execute_notebook("03", tmp_path, attendee_loop=nproc == 1, NPROC=nproc)
    assert results["world_size"] == nproc
    assert results["loss_fell_on_every_rank"] is True
    assert results["worst_last_to_first_ratio"] < 0.5
    assert results["last_loss_rank0"] < results["first_loss_rank0"]
    # every rank's parameters compared with rank 0's by torch.equal, not by a checksum: built
    # from different seeds, equal right after DDP(model), and still equal at the end
    assert results["replicas_identical"] is True and results["differing_tensors"] == 0
    assert results["differing_after_wrap"] == 0
    assert results["differing_before_ddp"] == (0 if nproc == 1 else 4 * (nproc - 1))
    # the mp.spawn form runs on the CPU tier too (gloo), one line per rank, and trains what
    # the torchrun form trains (the same program: checked loosely here, shown exactly)
    assert results["classic_form"] == "ran" or results["classic_form"].startswith("skipped")
    if results["tier"] == "cpu":
        assert results["classic_form"] == "ran" and results["spawn_ranks"] == nproc
    if results["classic_form"] == "ran":
        assert 0 <= results["spawn_checksum_difference"] <= 1e-6
    texts = [c["text"] for c in results["claims"]]
    assert any("mp.spawn form and the torchrun form" in t for t in texts) is (
        results["classic_form"] == "ran")
    outcome = "solved" if nproc == 3 else "not yet"
    assert [(t["name"], t["kind"], t["outcome"]) for t in results["tasks"]] == [
        ("equal_after_wrap", "predict", outcome), ("broadcast_from_rank0", "write", outcome)]


def test_every_planted_mistake_is_named_and_the_reference_accepted(tmp_path):
    """One launch of 3 ranks for the whole catalogue (each candidate in a process group of its
    own); the starter is "not tried" without a launch."""
    check = task_checks("03")["check_broadcast_from_rank0"]
    files = planted("broadcast_from_rank0", tmp_path)
    candidates = {stem: load_module(files[stem]).broadcast_from_rank0
                  for stem in MISTAKES}  # fmt: skip
    reference = load_module(SOLUTIONS / "03_your_first_ddp_run.py")
    candidates["reference"] = reference.broadcast_from_rank0

    def starter(model):
        raise NotImplementedError

    candidates["starter"] = starter
    verdicts = check(candidates)
    assert verdicts["reference"][0] is True, verdicts["reference"]
    assert verdicts["starter"][0] is None
    for stem, named in MISTAKES.items():
        ok, message = verdicts[stem]
        assert ok is False and named in message, (stem, message)
    messages = [verdicts[stem][1] for stem in MISTAKES]
    assert len(set(messages)) == len(messages), "two mistakes got the same message"
    assert sorted(files) == sorted(MISTAKES)
