"""Notebook 07: DDP built by hand in three steps, each checked against torch's DDP, then raced."""

import importlib.util

import pytest
from conftest import ROOT, claim_with, comparison_starting, execute_notebook

import coursekit

CHECKER = ROOT / "launchers" / "check_my_ddp.py"
SOLUTIONS = ROOT / "solutions"
REFERENCES = [f"{SOLUTIONS / 'ddp_naive.py'}:NaiveDDP",
              f"{SOLUTIONS / 'ddp_overlapped.py'}:OverlappedDDP:overlap",
              f"{SOLUTIONS / 'ddp_bucketed.py'}:BucketedDDP:overlap"]  # fmt: skip
BROADCAST = """        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.detach(), src=0)  # the same memory, outside autograd
"""
# planted wrong solutions: (reference file, class, old text -> new text, the message's key words)
WRONG = {
    "no_divide": ("ddp_naive.py", "NaiveDDP",
                  "p.grad /= world  # DDP averages", "pass  # (no division)",
                  "2x DDP's at 2 ranks: divide the sum by the world size"),
    "no_broadcast": ("ddp_naive.py", "NaiveDDP", BROADCAST, "",
                     "the ranks started from different weights"),
    "no_buffer_broadcast": ("ddp_naive.py", "NaiveDDP",
                            "list(module.parameters()) + list(module.buffers())",
                            "list(module.parameters())",
                            "broadcast rank 0's parameters and buffers"),
    "tied_weight_reduced_twice": ("ddp_naive.py", "NaiveDDP",
                                  "for p in self.module.parameters():",
                                  "for _, p in self.module.named_parameters(\n"
                                  "                remove_duplicate=False):",
                                  "one step all-reduced 2112 gradient elements, 1600 expected"),
    "no_wait": ("ddp_overlapped.py", "OverlappedDDP:overlap",
                "            handle.wait()  # its sum has arrived in p.grad\n", "",
                "were never waited for"),
    "forward_buckets": ("ddp_bucketed.py", "BucketedDDP:overlap",
                        "for p in reversed(params):", "for p in params:",
                        "nothing overlaps backward"),
}  # fmt: skip


def check(setup, specs, nproc, *more):
    run = coursekit.run_launcher(CHECKER, [a for s in specs for a in ("--impl", s)] + list(more),
                                 setup=setup, nproc=nproc, echo=False)  # fmt: skip
    assert run.metrics["world_size"] == nproc
    return run.metrics["cases"]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2, 3, 4])
def test_the_reference_solutions_train_as_ddp_does(nproc, setup):
    """Equal to torch's DDP in float64 and across ranks, the tied weight reduced once, the
    frozen layer never, every handle waited for, buckets started in backward."""
    cases = check(setup, REFERENCES, nproc)
    assert [c["problems"] for c in cases] == [[]] * len(cases)
    assert len(cases) == 1 + 1 + 3 * 2  # naive, overlapped, bucketed x 3 sizes x (1, 3) micro
    for c in cases:
        assert c["max_diff_vs_ddp"] <= 1e-10 and c["max_diff_across_ranks"] <= 1e-10
        assert c["start_spread"] == 0 and c["unwaited"] == 0 and c["calls_in_no_sync"] == 0
        assert c["reduced_elements"] == c["expected_elements"] == 1600  # tied once, frozen never
    naive, overlapped, *bucketed = cases
    assert naive["reduce_started_in_backward"] is False  # everything after backward
    assert overlapped["reduce_started_in_backward"] is True
    calls = {c["bucket_mb"]: c["all_reduce_calls_per_step"] for c in bucketed}
    assert calls[0.001] > calls[0.004] > calls[25.0] == 1  # smaller buckets, more calls
    assert all(c["reduce_started_in_backward"] for c in bucketed if c["bucket_mb"] < 1)
    assert {c["accumulate"] for c in bucketed} == {1, 3}


@pytest.mark.slow
def test_planted_wrong_solutions_are_rejected_with_their_message(setup, tmp_path, monkeypatch):
    """Each planted bug picked as the notebook picks a solution (COURSE_SOLUTIONS), all of them
    checked in one launch at 2 ranks, with the unfinished skeletons the learner starts from."""
    specs = []
    for name, (file, cls, old, new, _) in WRONG.items():
        text = (SOLUTIONS / file).read_text()
        assert text.count(old) == 1, f"the bug {name} no longer applies to the reference"
        folder = tmp_path / name
        folder.mkdir()
        (folder / file).write_text(text.replace(old, new))
        monkeypatch.setenv("COURSE_SOLUTIONS", str(folder))
        specs.append(f"{coursekit.answer_file('unused.py', file)}:{cls}")
    skeletons = [f"{ROOT / 'launchers' / f'my_ddp_{step}.py'}:{cls}" for step, cls in
                 [("naive", "NaiveDDP"), ("overlapped", "OverlappedDDP"),
                  ("bucketed", "BucketedDDP")]]  # fmt: skip
    cases = check(setup, specs + skeletons, 2, "--bucket-mb", "0.001,25", "--accumulate", "2")
    remaining = iter(cases)
    for name, (_, cls, _, _, words) in WRONG.items():
        # a bucketed wrapper: 2 sizes x (1, 2) micro-batches; the others one case
        found = [next(remaining) for _ in range(4 if cls.startswith("BucketedDDP") else 1)]
        assert found[0]["ok"] is False, name
        assert any(words in problem for problem in found[0]["problems"]), (name, found[0])
        if name == "forward_buckets":  # one bucket of 25 MiB cannot overlap: nothing to reject
            assert [c["ok"] for c in found] == [False, False, True, True]
    rest = list(remaining)
    assert [c["wrapper"] for c in rest] == ["NaiveDDP", "OverlappedDDP"] + ["BucketedDDP"] * 4
    for c, step in zip(rest, [1, 2] + [3] * 4, strict=True):
        assert c["ok"] is False
        assert c["problems"][0].startswith(f"it raised NotImplementedError: step {step}:")


def test_the_checker_demands_overlap_only_where_several_calls_could_overlap():
    spec = importlib.util.spec_from_file_location("check_my_ddp", CHECKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    good = {"start_spread": 0.0, "grad_ratio": 1.0, "unwaited": 0, "calls_in_no_sync": 0,
            "reduced_elements": 10, "expected_elements": 10, "all_reduce_calls_per_step": 1,
            "reduce_started_in_backward": False, "max_diff_vs_ddp": 0.0,
            "max_diff_across_ranks": 0.0}  # fmt: skip
    assert module.problems(good, 2, True, 3) == []  # one bucket: nothing could overlap
    several = good | {"all_reduce_calls_per_step": 4}
    assert "nothing overlaps backward" in module.problems(several, 2, True, 3)[0]
    assert module.problems(several, 2, False, 3) == []  # the naive step may not overlap
    doubled = good | {"grad_ratio": 2.0}
    assert "divide the sum by the world size" in module.problems(doubled, 2, False, 3)[0]
    assert "world size" not in module.problems(good | {"grad_ratio": 1.5}, 2, False, 3)[0]


@pytest.mark.slow
def test_notebook_with_the_reference_solutions(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")  # the kernel inherits it
    r = execute_notebook("07", tmp_path)
    assert r["world_size"] == 2 and r["backend"] == "gloo"
    assert r["naive_passed"] is True and r["overlapped_passed"] is True
    assert r["bucketed_passed"] is True and r["exercise_passed"] is True
    assert r["cases_checked"] == 8 and r["raced"] == "your"
    # the race: every variant timed, its all-reduces counted
    assert r["all_reduce_calls_naive"] == r["all_reduce_calls_overlapped"] == r["tensors"]
    assert r["all_reduce_calls_torch_DDP"] == r["ddp_buckets"] >= 1
    steps = {k: v for k, v in r.items() if k.startswith("step_ms_")}
    assert len(steps) == 2 + 3 + 1 and all(v > 0 for v in steps.values())  # SMOKE: 3 sizes
    best = r["best_bucket"].replace(" ", "_").replace(".", "p")
    assert r["bucketed_vs_ddp"] == pytest.approx(r[f"step_ms_{best}"] / r["step_ms_torch_DDP"])
    assert r[f"all_reduce_calls_{r['profiled_bucket'].replace(' ', '_').replace('.', 'p')}"] > 1
    # every measured outcome is a claim on the figures the results file records
    race = claim_with(r, "ratio <= 1.5")
    assert race["figures"]["ratio"] == pytest.approx(r["bucketed_vs_ddp"])
    overlap = claim_with(r, "share > 0")
    assert overlap["figures"]["share"] == pytest.approx(r["overlap_bucketed"])
    ddp_overlap = claim_with(r, "ddp_share < share")
    assert ddp_overlap["figures"]["ddp_share"] == pytest.approx(r["overlap_ddp"])
    # the timing comparisons carry the spread of the rounds, each side by side
    against_ddp = comparison_starting(r, f"your {r['best_bucket']} version took")
    assert against_ddp["figures"]["ratio"] == pytest.approx(r["bucketed_vs_ddp"])
    naive = comparison_starting(r, "one blocking all-reduce per tensor")
    assert naive["figures"]["ratio"] == pytest.approx(r["step_ms_naive"] / r[f"step_ms_{best}"])
    hooks = comparison_starting(r, "starting each all-reduce during backward")
    assert hooks["figures"]["overlapped"] == pytest.approx(r["step_ms_overlapped"])
    for c in (against_ddp, naive, hooks):
        assert c["figures"]["measurements"] == 3  # SMOKE's rounds
        assert c["figures"]["ratio_low"] <= c["figures"]["ratio"] <= c["figures"]["ratio_high"]
