"""Notebook 09 (pitfalls in real training): every pitfall reproduced (its error text
matched), every fix green, the learner's two tasks (the indices a padded sampler repeats; the
exercise's two planted bugs, judged by a run, with a catalogue of wrong fixes run in one
launch), no process left."""

import hashlib
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, execute_notebook, notebook_path, processes_with
from task_kit import facts_of_each, load_module, planted, solved, task_checks, wrong_answers

import coursekit

STEM = "09_pitfalls_in_real_training"
WRONG = Path(__file__).parent / "solutions_wrong"
# every planted wrong fix of pitfalls_exercise.py (and the launcher as shipped), and the words
# its NOT YET names it by
CATALOGUE = {
    "only_hang_fixed": ("epoch(s) [1, 2] started with a batch of an earlier epoch",
                        "the order never changes"),
    "set_epoch_after_the_loop": ("epoch(s) [1] started", "the order changed late"),
    "only_set_epoch_fixed": ("it hung", "dist.all_reduce(totals)", "ddp_model("),
    "padded_test_sampler": ("counted [102] test samples for 101", "some samples twice"),
    "every_rank_scores_all": ("counted [202] test samples for 101", "every rank scored every"),
    "no_all_reduce": ("counted [50, 51] test samples for 101", "were not added up"),
}
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
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")  # the kernel inherits it (as the browser's)
    r = execute_notebook("09", tmp_path, NPROC=2)
    assert_every_pitfall(r)
    assert r["exercise_passed"] is True
    assert solved(r) == {"padded_twice": "solved", "pitfalls_exercise": "solved"}
    assert processes_with(str(tmp_path)) == [], "a process outlived the notebook"


@pytest.mark.slow
def test_wrong_solution_three_ranks(tmp_path, monkeypatch):
    """3 ranks, the wrong answers of solutions_wrong/nb09 (the padding taken from the end) and
    the catalogue's fix of the hang alone: both tasks NOT YET, and the notebook runs to its end."""
    hang_fixed = {"pitfalls_exercise.py": ("pitfalls_exercise", "only_hang_fixed")}
    wrong = wrong_answers("nb09", tmp_path / "wrong", hang_fixed)
    monkeypatch.setenv("COURSE_SOLUTIONS", str(wrong))
    r = execute_notebook("09", tmp_path, attendee_loop=True, NPROC=3)
    assert_every_pitfall(r)
    assert r["exercise_passed"] is False
    assert solved(r) == {"padded_twice": "not yet", "pitfalls_exercise": "not yet"}
    assert processes_with(str(tmp_path)) == [], "a process outlived the notebook"


@pytest.mark.slow
def test_the_exercise_check_names_every_planted_mistake(setup, tmp_path):
    """The notebook's own check on the launcher as shipped (it hangs), on every wrong fix of
    the catalogue and on the reference, their facts from ONE torchrun launch that runs each in
    turn: each rejected with the mistake it plants, each message its own; the reference
    accepted."""
    check = task_checks("09")["check_pitfalls_exercise"]
    files = sorted(planted("pitfalls_exercise", tmp_path / "planted").values())
    assert {f.stem for f in files} == set(CATALOGUE)
    shipped = ROOT / "launchers" / "pitfalls_exercise.py"
    reference = ROOT / "solutions" / "pitfalls_exercise.py"
    facts = facts_of_each([shipped, reference, *files], setup, tmp_path)
    ok, message = check(shipped, setup, facts[0])
    assert ok is False and "it hung" in message and "dist.all_reduce(totals)" in message, message
    ok, message = check(reference, setup, facts[1])
    assert ok is True and "counted the 101 test samples once" in message, message
    messages = {}
    for path, found in zip(files, facts[2:], strict=True):
        ok, message = check(path, setup, found)
        assert ok is False and all(w in message for w in CATALOGUE[path.stem]), (path.stem, message)
        messages[path.stem] = message
    assert len(set(messages.values())) == len(CATALOGUE)


def test_the_starter_is_known_by_its_hash_and_the_padding_reference_is_the_samplers():
    """The notebook calls pitfalls_exercise.py "not tried" while it is byte for byte the
    shipped starter (its sha-256 in the check's cell); the reference answer of the padding
    task is what torch's DistributedSampler deals out, for several sizes and rank counts."""
    from collections import Counter

    from torch.utils.data import DistributedSampler

    source = "\n".join(c.source for c in nbformat.read(notebook_path("09"), as_version=4).cells)
    shipped = hashlib.sha256((ROOT / "launchers" / "pitfalls_exercise.py").read_bytes())
    assert f'== "{shipped.hexdigest()[:12]}"' in source
    twice = load_module(ROOT / "solutions" / f"{STEM}.py").twice
    wrong = load_module(WRONG / "nb09" / f"{STEM}.py").twice
    for size, ranks in [(10, 4), (11, 2), (11, 3), (12, 4), (13, 4), (2, 8)]:
        seen = Counter(i for r in range(ranks) for i in DistributedSampler(
            range(size), num_replicas=ranks, rank=r, shuffle=False))
        assert twice(size, ranks) == sorted(i for i, n in seen.items() if n > 1), (size, ranks)
    assert wrong(10, 4) != twice(10, 4)
