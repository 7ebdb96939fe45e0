"""Notebook 12: tensor, pipeline and 2-D parallelism of a small transformer; the memory
calculator checked against every layout's measured bytes; the learner's tasks (Megatron's split
of one MLP block, written and checked; the bubble, predicted). The notebook at 2 ranks solved
(the browser test's run: its TP and PP runs are the tiny model at 2 ranks, its 2-D mesh 4
ranks) and at 3 with wrong answers, the 2-D launcher on a 1 x 2 mesh here, TP and PP at 3 ranks
in test_launchers.py."""

import shutil

import pytest
import torch
from common import memory
from conftest import ROOT, execute_notebook
from task_kit import planted, task_checks

import coursekit

LAUNCHERS = ROOT / "launchers"
# the catalogue of planted mistakes in the MLP split (tests/planted/megatron_mlp.py): what
# each is rejected for, in the words of its NOT YET message (at 2 ranks)
MLP_MISTAKES = {
    "g_reduces_in_backward": "backward ran 2 all-reduces, 1 expected: g's backward",
    "fc_by_rows": "that splits fc's inputs (by rows)",
    "bias_on_every_rank": "the output holds proj's bias 2 times",
    "averaged": "the output is 1/2 of the sum of the partial products",
    "no_f": "backward ran no all-reduce: f's backward must sum",
    "f_reduces_in_forward": "forward ran 2 all-reduces, 1 expected: f passes x on",
    "proj_by_columns": "that splits proj's outputs (by columns)",
}
TINY_MODEL = ["--dim", "32", "--heads", "4", "--layers", "4", "--seq", "16", "--vocab", "32",
              "--steps", "2"]
TINY = [*TINY_MODEL, "--batch", "8"]
SHAPE = dict(hidden=32, layers=4, heads=4, seq=16, vocab=32, dtype="float64")
TOLERANCE = 1e6 * torch.finfo(torch.float64).eps


@pytest.mark.slow
def test_beyond_data_parallelism_notebook(tmp_path, monkeypatch):
    nproc = 2
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")  # the tasks solved, as in the browser's run
    r = execute_notebook("12", tmp_path, NPROC=nproc)
    # the bubble is judged against the schedule's count, (p-1)/(m+p-1), within 10 %: the
    # reference (that count) is right whatever this CPU measured; the run's spread is kept
    m, low, high = r["bubble_judged_m"], r["bubble_judged_low"], r["bubble_judged_high"]
    assert m == 1 and 0 < low <= r["bubble_m1"] <= high < 1  # solutions/12: bubble_m = 1
    assert {t["name"]: t["outcome"] for t in r["tasks"]} == {
        "megatron_mlp": "solved", "bubble": "solved"}
    assert [t["kind"] for t in r["tasks"]] == ["write", "predict"]
    assert r["world_size"] == nproc and r["backend"] == "gloo" and r["mesh_backend"] == "gloo"
    # every layout trains the one-process model (float64)
    diffs = [k for k in r if k.endswith("_max_diff")]
    assert len(diffs) == 8, diffs
    assert r["f64_tolerance"] <= TOLERANCE
    assert all(0 <= r[k] <= r["f64_tolerance"] for k in diffs), {k: r[k] for k in diffs}
    # Megatron's 2 + 2 all-reduces per block (4 blocks); the Linears-only plan more
    expected = r["tp_expected_allreduces_per_phase"]
    assert expected == 8
    for impl in ("hand", "torch"):
        assert r[f"tp_{impl}_forward_allreduces"] == r[f"tp_{impl}_backward_allreduces"] == expected
    assert r["tp_torch_linears_backward_allreduces"] > expected
    # each of batch x seq x hidden float64 values (SMOKE: 8 x 16 x 8*4 heads)
    assert r["tp_allreduce_sizes"] == 1
    assert r["tp_allreduce_bytes"] == r["tp_expected_allreduce_bytes"] == 8 * 16 * 32 * 8
    assert 1 / nproc < r["tp_param_share_rank0"] < 1  # the split part / N, the rest whole
    # the pipeline: fewer micro-batches in flight under 1F1B; more micro-batches, less bubble
    m = r["pipeline_microbatches_shown"]
    assert m == 2 * nproc
    assert r["1f1b_peak_activation_bytes_stage0"] < r["gpipe_peak_activation_bytes_stage0"]
    assert 0 < r[f"bubble_m{m}"] < r["bubble_m1"] < 1
    assert r["bubble_formula_m1"] == (nproc - 1) / nproc
    # the 2-D mesh: all-reduces on tp, all-gathers and reduce-scatters on dp
    assert r["fsdp_tp_misplaced_collectives"] == 0
    # the calculator, every rank of every layout (TP by hand and torch, 4 PP runs, the 2 x 2
    # mesh): parameters counted exactly, the whole within 1 % (the notebook claims 10 %)
    assert r["calculator_rank_runs"] == nproc + nproc + 4 * nproc + 4
    assert r["calculator_params_exact"] is True
    assert r["calculator_worst_error"] <= 0.01
    # every claim but the bubble's (timing, at SMOKE sizes on a shared CPU) holds everywhere
    held = {c["text"]: c["held"] for c in r["claims"]}
    timing = "The measured bubble"
    assert all(ok for text, ok in held.items() if not text.startswith(timing)), held


@pytest.mark.slow
def test_wrong_answers_run_to_the_end_rejected(tmp_path, monkeypatch):
    """A learner's wrong answers (g all-reduces in backward too; "1F1B has no bubble"): both
    NOT YET, and the notebook runs to its end, at 3 ranks (the browser's run is at 2)."""
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    mistake = planted("megatron_mlp", tmp_path / "planted")["g_reduces_in_backward"]
    shutil.copy(mistake, wrong / "megatron_mlp.py")
    (wrong / "12_beyond_data_parallelism.py").write_text(
        "bubble_m = 5  # not among the runs: judged at 2N\n\n\n"
        "def bubble(p, m):\n    return 0.0  # 1F1B keeps every stage busy\n")
    monkeypatch.setenv("COURSE_SOLUTIONS", str(wrong))
    r = execute_notebook("12", tmp_path, attendee_loop=True, NPROC=3)
    assert {t["name"]: t["outcome"] for t in r["tasks"]} == {"megatron_mlp": "not yet",
                                                             "bubble": "not yet"}
    assert r["world_size"] == 3 and r["pipeline_microbatches_shown"] == 6
    assert r["tp_hand_forward_allreduces"] == r["tp_expected_allreduces_per_phase"] == 8


# the bubble prediction's planted slips (a learner's formula, as solutions/12's bubble(p, m)):
# what check_bubble names for each, at p = 2, m = 4 and at p = 3, m = 6
BUBBLE_SLIPS = {
    "percentage": (lambda p, m: 100 * (p - 1) / (m + p - 1), "a percentage"),
    "megatron_form": (lambda p, m: (p - 1) / m, "(p-1)/m: the idle time over the compute time"),
    "m_and_p_swapped": (lambda p, m: (m - 1) / (m + p - 1), "m and p swapped"),
    "busy_share": (lambda p, m: m / (m + p - 1), "the share a stage computes"),
    "no_bubble": (lambda p, m: 0.0, "no bubble: 1F1B still fills and drains"),
    "halved_by_1f1b": (lambda p, m: (p - 1) / (m + p - 1) / 2, "1F1B idles as long as GPipe"),
    "fill_and_drain_apart": (lambda p, m: 2 * (p - 1) / (m + 2 * (p - 1)),
                             "the fill and the drain counted as p-1 slots each"),
}


@pytest.mark.parametrize("p, m", [(2, 4), (3, 6)])
def test_every_planted_bubble_slip_is_named_and_the_count_accepted(p, m):
    """check_bubble (the notebook's task-check cell) on the reference, 10 % either side of
    it, no prediction, text, and every planted slip: each rejected with what it is."""
    from task_kit import load_module

    check = task_checks("12")["check_bubble"]
    count = load_module(ROOT / "solutions" / "12_beyond_data_parallelism.py").bubble(p, m)
    assert count == (p - 1) / (m + p - 1)
    for right in (count, 0.91 * count, 1.09 * count):
        ok, message = check(right, p, m)
        assert ok is True and f"(p-1)/(m+p-1) = {count:.3f}" in message, message
    assert check(None, p, m)[0] is None
    assert check("0.2", p, m) == (False, "give a number from 0 to 1, not '0.2'")
    messages = []
    for name, (slip, words) in BUBBLE_SLIPS.items():
        ok, message = check(slip(p, m), p, m)
        assert ok is False and words in message and "; or " not in message, (name, message)
        messages.append(message)
    assert len(set(messages)) == len(messages)
    ok, message = check(1.4, p, m)  # no known slip: how far from the count
    assert ok is False and "x the schedule's count" in message, message


@pytest.mark.slow
def test_every_planted_mlp_mistake_is_rejected_with_its_name(setup, tmp_path):
    """The notebook's own check (its task-check cell) on the reference, the untouched starter
    and every planted mistake, all in one launch at 2 ranks."""
    check = task_checks("12")["check_megatron_mlp"]
    mlp = planted("megatron_mlp", tmp_path / "planted")
    files = [ROOT / "solutions" / "megatron_mlp.py", LAUNCHERS / "my_megatron_mlp.py",
             *(mlp[name] for name in MLP_MISTAKES)]
    assert sorted(mlp) == sorted(MLP_MISTAKES)
    (ok, message), (starter, _), *rejected = check(files, setup, nproc=2)
    assert ok is True, message
    assert starter is None  # not tried: it raises NotImplementedError
    for (name, words), (ok, message) in zip(MLP_MISTAKES.items(), rejected, strict=True):
        assert ok is False, name
        assert words in message, (name, message)
    assert len({message for _, message in rejected}) == len(rejected)  # a message of its own each


@pytest.mark.slow
def test_an_mlp_split_that_hangs_is_stopped_and_says_where(setup, tmp_path):
    """g's all-reduce on rank 0 only: the ranks' collectives differ and it hangs; the check
    stops it at its timeout and names the line each rank stood at."""
    hangs = planted("megatron_mlp_hang", tmp_path / "planted")["megatron_mlp"]
    ok, message = task_checks("12")["check_megatron_mlp"](hangs, setup, nproc=2, timeout_s=20)
    assert ok is False
    assert message.startswith("it hung, stopped after 20 s"), message
    assert "rank 0: line 20 of megatron_mlp.py" in message, message


HELD = ("param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes")


def per_rank_total(held):
    return sum(held[k] for k in HELD)


@pytest.mark.slow
@pytest.mark.parametrize("launcher, args, layout", [
    # TP and PP at 2 ranks: the notebook's own runs (its test above); here the 2-D launcher
    # on a 1 x 2 mesh, which the notebook (a 2 x 2 mesh) does not make
    ("fsdp_tp_2d.py", ["--tp", "2"], dict(micro_batch=8, tp=2)),
], ids=["2d_1x2"])  # fmt: skip
def test_launchers_at_two_ranks_match_one_process_and_the_calculator(launcher, args, layout, setup):
    run = coursekit.run_launcher(LAUNCHERS / launcher, TINY + args, setup=setup, nproc=2,
                                 name=launcher.removesuffix(".py"), echo=False)
    assert run.metrics["world_size"] == 2 and run.metrics["backend"] == "gloo"
    assert run.metrics["loss_max_diff"] <= TOLERANCE
    predicted = memory.transformer_memory(**layout, **SHAPE)
    for held in run.metrics["ranks"]:
        assert held["grad_max_diff"] <= TOLERANCE and held["param_max_diff"] <= TOLERANCE
        stage = predicted[held["rank"]] if "pp" in layout else predicted[0]
        assert held["param_bytes"] == stage["parameters"]  # counted exactly
        assert abs(per_rank_total(held) / stage["total"] - 1) <= 0.01, (held, stage)
        assert held["device_peak_bytes"] is None  # CPU ranks: the ledgers are the figures


@pytest.mark.slow
@pytest.mark.parametrize("launcher, bad, message", [
    ("fsdp_tp_2d.py", ["--tp", "3"], "--tp 3 must divide the ranks (2)"),
    ("tensor_parallel.py", ["--heads", "3", "--dim", "33"],
     "--heads 3 must be a multiple of the ranks (2)"),
    ("pipeline_parallel.py", ["--runs", "hand:1f1b:0"], "'hand:1f1b:0': give IMPL:SCHEDULE:M"),
], ids=["2d_tp", "tp_heads", "pp_microbatches"])  # fmt: skip
def test_a_layout_the_ranks_cannot_make_is_refused_before_any_step(launcher, bad, message, setup):
    """Each launcher names the option and the fix before its process group trains anything."""
    tiny = TINY_MODEL if launcher == "pipeline_parallel.py" else TINY  # its batch: M x micro
    run = coursekit.run_launcher(LAUNCHERS / launcher, tiny + bad, setup=setup, nproc=2,
                                 name=f"refused_{launcher.removesuffix('.py')}", echo=False,
                                 check=False)
    assert run.returncode != 0
    assert message in run.output
    assert "step 0" not in run.output
