"""Notebook 07: DDP built by hand in three steps, each checked against torch's DDP, then raced.

The check (the notebook's task-check cell, check_ddp_wrappers) runs on a catalogue of planted
wrong answers per task (tests/solutions_wrong/<task>.py), all in one launch, each rejected with
the mistake it names; a hang in a launch of its own, stopped and located."""

import importlib
import shutil

import pytest
from conftest import ROOT, comparison_starting, execute_notebook
from task_kit import load_module, planted, task_checks

import coursekit

CHECKER = ROOT / "launchers" / "check_my_ddp.py"
STEM = "07_build_ddp_yourself"
WRONG = ROOT / "tests" / "solutions_wrong" / "nb07"
SOLUTIONS = ROOT / "solutions"
REFERENCES = [f"{SOLUTIONS / 'ddp_naive.py'}:NaiveDDP",
              f"{SOLUTIONS / 'ddp_overlapped.py'}:OverlappedDDP:overlap",
              f"{SOLUTIONS / 'ddp_bucketed.py'}:BucketedDDP:overlap"]  # fmt: skip
# task -> (its reference file, the class spec, the starter): the three wrappers of the notebook
TASKS = {
    "naive_ddp": ("ddp_naive.py", "NaiveDDP", "my_ddp_naive.py"),
    "overlapped_ddp": ("ddp_overlapped.py", "OverlappedDDP:overlap", "my_ddp_overlapped.py"),
    "bucketed_ddp": ("ddp_bucketed.py", "BucketedDDP:overlap", "my_ddp_bucketed.py"),
}
# the catalogue: task -> planted mistake (its file) -> words of the message that names it
NAMED = {
    "naive_ddp": {
        "no_divide": "2x DDP's at 2 ranks: divide the sum by the world size",
        "divide_twice": "0.5x DDP's at 2 ranks: divided twice? (ReduceOp.AVG already divides)",
        "no_broadcast": "the ranks started from different weights",
        "no_buffer_broadcast": "the ranks started with different buffers",
        "tied_weight_twice": "one step all-reduced 2112 gradient elements, 1600 expected",
        "only_others_receive": "it hung",  # its own launch: test_a_hang_is_stopped_and_located
    },
    "overlapped_ddp": {
        "no_wait": "were never waited for before optimizer.step()",
        "wait_in_hook": "no all-reduce was still running when backward returned: each handle "
                        "was waited for inside backward",
        "blocking_in_hook": "dist.all_reduce returns a handle only with async_op=True",
        "no_divide": "2x DDP's at 2 ranks: divide the sum by the world size",
        "handles_kept": "step 1's gradients equal DDP's, step 2's are",
    },
    "bucketed_ddp": {
        "forward_buckets": "nothing overlaps backward",
        "one_bucket": "one all-reduce carried 12,800 bytes, more than bucket_mb plus the "
                      "largest parameter: 1 bucket(s), where closing each once it reaches "
                      "bucket_mb makes 5",
        "bucket_per_tensor": "two buckets in a row held only 2,176 bytes together",
        "counts_in_no_sync": "all-reduces ran inside no_sync()",
        "no_reset": "step 1's gradients equal DDP's, step 2's are",
        "no_copy_back": "the ranks' gradients differ",
    },
}  # fmt: skip
HANGS = {"only_others_receive"}


def check(setup, specs, nproc, *more):
    run = coursekit.run_launcher(CHECKER, [a for s in specs for a in ("--impl", s)] + list(more),
                                 setup=setup, nproc=nproc, echo=False)  # fmt: skip
    assert run.metrics["world_size"] == nproc
    return run.metrics


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 3, 4])  # 2 ranks: the catalogue's launch
def test_the_reference_solutions_train_as_ddp_does(nproc, setup):
    """Equal to torch's DDP in float64 and across ranks, the tied weight reduced once, the
    frozen layer never, every handle waited for after backward, buckets started in backward
    and as many as bucket_mb implies."""
    metrics = check(setup, REFERENCES, nproc)
    cases = metrics["cases"]
    assert [c["problems"] for c in cases] == [[]] * len(cases)
    assert [metrics["verdicts"][s] for s in REFERENCES] == [[True, ""]] * 3
    assert len(cases) == 1 + 1 + 3 * 2  # naive, overlapped, bucketed x 3 sizes x (1, 3) micro
    for c in cases:
        assert c["max_diff_vs_ddp"] <= 1e-10 and c["max_diff_across_ranks"] <= 1e-10
        assert c["start_spread"] == 0 and c["unwaited"] == 0 and c["calls_in_no_sync"] == 0
        assert c["reduced_elements"] == c["expected_elements"] == 1600  # tied once, frozen never
        assert c["grad_spread"] == 0 and c["blocking_calls"] == (c["wrapper"] == "NaiveDDP") * 9
    naive, overlapped, *bucketed = cases
    assert naive["reduce_started_in_backward"] is False  # everything after backward
    assert overlapped["reduce_started_in_backward"] is True
    assert overlapped["in_flight_after_backward"] >= 1  # waited for after backward, not in it
    calls = {c["bucket_mb"]: c["all_reduce_calls_per_step"] for c in bucketed}
    assert calls[0.001] > calls[0.004] > calls[25.0] == 1  # smaller buckets, more calls
    assert all(c["all_reduce_calls_per_step"] == c["ddp_rule_buckets"] for c in bucketed)
    assert all(c["reduce_started_in_backward"] for c in bucketed if c["bucket_mb"] < 1)
    assert {c["accumulate"] for c in bucketed} == {1, 3}


@pytest.mark.slow
def test_the_catalogue_of_wrong_wrappers_in_one_launch(setup, monkeypatch, capsys, tmp_path):
    """Every planted mistake (but the hang) rejected with the mistake it names, a distinct
    message each; the references (picked as the notebook picks them) accepted; the starters
    as given are "not tried", and their NotImplementedError is printed once, not per case."""
    check_ddp_wrappers = task_checks("07")["check_ddp_wrappers"]
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    specs, expected = [], []
    for task, (reference, cls, starter) in TASKS.items():
        files = planted(task, tmp_path / "planted" / task)
        assert set(files) == set(NAMED[task]), f"{task}: the catalogue and its messages differ"
        assert len(files) >= 5
        for name in sorted(set(files) - HANGS):
            specs.append(f"{files[name]}:{cls}")
            expected.append((task, name, NAMED[task][name]))
        specs.append(f"{coursekit.answer_file('unused.py', reference)}:{cls}")
        expected.append((task, "reference", None))
        specs.append(f"{ROOT / 'launchers' / starter}:{cls}")
        expected.append((task, "starter", None))
    outcomes = check_ddp_wrappers(specs, setup, checker=CHECKER)
    messages = {}
    for (task, name, words), (ok, message) in zip(expected, outcomes, strict=True):
        if name == "reference":
            assert ok is True, (task, message)
        elif name == "starter":
            assert ok is None and "complete the TODOs" in message, (task, message)
        else:
            assert ok is False and words in message, (task, name, message)
            messages.setdefault(task, set()).add(message)
    for task, found in messages.items():
        assert len(found) == len(NAMED[task]) - len(HANGS & set(NAMED[task])), task
    shown = capsys.readouterr().out
    assert shown.count("it raised NotImplementedError: step 3:") == 1  # 6 cases, printed once


@pytest.mark.slow
def test_a_hang_is_stopped_and_located(setup, tmp_path):
    """A wrapper whose ranks call different collectives hangs: the check stops it at its
    timeout (60 s in the notebook, 25 here) and names each rank's place."""
    check_ddp_wrappers = task_checks("07")["check_ddp_wrappers"]
    spec = f"{planted('naive_ddp', tmp_path / 'planted')['only_others_receive']}:NaiveDDP"
    [(ok, message)] = check_ddp_wrappers([spec], setup, timeout_s=25, checker=CHECKER)
    assert ok is False and message.startswith("it hung and was stopped after 25 s")
    assert "rank 1 at your line 16: dist.broadcast(tensor.detach(), src=0)" in message
    assert "rank 0 at the check's next call" in message


def test_the_checker_names_what_is_wrong_from_the_facts(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "launchers"))  # as under torchrun
    module = importlib.import_module("nb07.ddp_checker")  # check_my_ddp.py's machinery
    good = {"start_spread": 0.0, "start_spread_params": 0.0, "grad_ratio": 1.0,
            "grad_ratios": [1.0, 1.0, 1.0], "grad_spread": 0.0, "unwaited": 0,
            "calls_in_no_sync": 0, "reduced_elements": 10, "expected_elements": 10,
            "all_reduce_calls_per_step": 1, "in_flight_after_backward": 1, "blocking_calls": 0,
            "reduce_started_in_backward": False, "max_diff_vs_ddp": 0.0,
            "max_diff_across_ranks": 0.0}  # fmt: skip
    assert module.problems(good, 2, True, 3) == []  # one bucket: nothing could overlap
    several = good | {"all_reduce_calls_per_step": 4, "reduce_started_in_backward": True}
    assert module.problems(several, 2, True, 3) == []
    late = several | {"reduce_started_in_backward": False}
    assert "nothing overlaps backward" in module.problems(late, 2, True, 3)[0]
    assert module.problems(late, 2, False, 3) == []  # the naive step may not overlap
    stalled = several | {"in_flight_after_backward": 0}
    assert "waited for inside backward" in module.problems(stalled, 2, True, 3)[0]
    blocking = stalled | {"blocking_calls": 4}
    assert "blocking (no async_op=True)" in module.problems(blocking, 2, True, 3)[0]
    doubled = good | {"grad_ratio": 2.0}
    assert "divide the sum by the world size" in module.problems(doubled, 2, False, 3)[0]
    assert "world size" not in module.problems(good | {"grad_ratio": 1.5}, 2, False, 3)[0]
    # buckets against bucket_mb: 1,000 bytes a bucket, parameters of at most 400 bytes
    sized = good | {"cap_bytes": 1000.0, "largest_param_bytes": 400, "ddp_rule_buckets": 3}
    assert module.problems(sized | {"bucket_bytes": [1200, 1100, 700]}, 2, False, 3) == []
    one = module.problems(sized | {"bucket_bytes": [3000]}, 2, False, 3)
    assert "carried 3,000 bytes" in one[0] and "1 bucket(s)" in one[0] and "makes 3" in one[0]
    small = module.problems(sized | {"bucket_bytes": [300, 400, 1200]}, 2, False, 3)
    assert "two buckets in a row held only 700 bytes together" in small[0]
    assert module.ddp_rule_buckets([], 1000.0) == 0


def reference_calls(results):
    """The reference prediction of the race's all-reduces at 2 MiB, from the results record."""
    reference = load_module(ROOT / "solutions" / f"{STEM}.py").bucket_calls
    return reference({"tensors": results["tensors"], "grad_mb": results["grad_mb"]})


@pytest.mark.slow
def test_notebook_with_wrong_wrappers(tmp_path, monkeypatch):
    """One wrong answer per step through the whole notebook (the browser test runs it solved):
    each step NOT YET with its named mistake, the race runs the references, every claim made."""
    folder = tmp_path / "wrong"
    folder.mkdir()
    for task, mistake in [("naive_ddp", "no_divide"), ("overlapped_ddp", "wait_in_hook"),
                          ("bucketed_ddp", "one_bucket")]:  # fmt: skip
        shutil.copy(planted(task, tmp_path / "planted" / task)[mistake], folder / TASKS[task][0])
    shutil.copy(WRONG / f"{STEM}.py", folder)  # the prediction: one all-reduce per tensor
    monkeypatch.setenv("COURSE_SOLUTIONS", str(folder))
    r = execute_notebook("07", tmp_path, attendee_loop=True)
    assert r["world_size"] == 2 and r["backend"] == "gloo"
    assert r["naive_passed"] is False and r["overlapped_passed"] is False
    assert r["bucketed_passed"] is False and r["exercise_passed"] is False
    assert [(t["name"], t["outcome"]) for t in r["tasks"]] == [
        (task, "not yet") for task in TASKS] + [("bucket_calls", "not yet")]
    # the prediction: the reference's count is what the race measured, the wrong one is not
    assert r["all_reduce_calls_bucketed_2_MiB"] == reference_calls(r) != r["tensors"]
    assert r["raced"] == "the reference" and r["raced_yours"] == ""
    # the race: every variant timed, its all-reduces counted
    assert r["all_reduce_calls_naive"] == r["all_reduce_calls_overlapped"] == r["tensors"]
    assert r["all_reduce_calls_torch_DDP"] == r["ddp_buckets"] >= 1
    steps = {k: v for k, v in r.items() if k.startswith("step_ms_")}
    assert len(steps) == 2 + 3 + 1 and all(v > 0 for v in steps.values())  # SMOKE: 3 sizes
    best = r["best_bucket"].replace(" ", "_").replace(".", "p")
    assert r["bucketed_vs_ddp"] == pytest.approx(r[f"step_ms_{best}"] / r["step_ms_torch_DDP"])
    assert r[f"all_reduce_calls_{r['profiled_bucket'].replace(' ', '_').replace('.', 'p')}"] > 1
    # every measured outcome is a claim on the figures the results file records
    [overlap] = [c for c in r["claims"] if c["condition"] == "share > 0 and ddp_share > 0"]
    assert overlap["figures"]["share"] == pytest.approx(r["overlap_bucketed"])
    assert overlap["figures"]["ddp_share"] == pytest.approx(r["overlap_ddp"])
    # the timing comparisons carry the spread of the rounds, each side by side
    against_ddp = comparison_starting(r, f"the reference {r['best_bucket']} version took")
    assert against_ddp["figures"]["ratio"] == pytest.approx(r["bucketed_vs_ddp"])
    naive = comparison_starting(r, "one blocking all-reduce per tensor")
    assert naive["figures"]["ratio"] == pytest.approx(r["step_ms_naive"] / r[f"step_ms_{best}"])
    hooks = comparison_starting(r, "starting each all-reduce during backward")
    assert hooks["figures"]["overlapped"] == pytest.approx(r["step_ms_overlapped"])
    for c in (against_ddp, naive, hooks):
        assert c["figures"]["measurements"] == 3  # SMOKE's rounds
        assert c["figures"]["ratio_low"] <= c["figures"]["ratio"] <= c["figures"]["ratio_high"]
