"""run_launcher(progress=STEPS): a bar that follows rank 0's "step N" lines.

In a notebook tqdm.auto draws a widget (the browser test watches it move); here, outside
Jupyter, the same bar is text on stderr.
"""

import re

import pytest
from conftest import ROOT

import coursekit
from coursekit import echo as live
from coursekit.echo import HEADLESS_ENV, steps_done

STEPS_LIVE = ROOT / "tests" / "browser" / "steps_live.py"


def last_bar(stderr: str) -> str:
    return [part for part in stderr.replace("\r", "\n").splitlines() if "step" in part][-1]


def test_progress_follows_steps_counted_from_one(setup, capsys, monkeypatch):
    monkeypatch.delenv(HEADLESS_ENV, raising=False)  # a front end: a bar, no lines
    run = coursekit.run_launcher(STEPS_LIVE, ["--steps", 5, "--interval", 0.3], setup=setup,
                                 nproc=2, progress=5)  # fmt: skip
    assert run.ok and len([t for t in run.rank_lines(0) if t.startswith("step")]) == 5
    out, err = capsys.readouterr()
    assert not any(t.startswith("step ") for t in out.splitlines())  # the bar shows them
    assert "5/5" in last_bar(err)
    # it moved during the run, not only at the end (tqdm redraws at most every 0.1 s)
    assert re.search(r" [1-4]/5 ", err), err


@pytest.mark.parametrize("lines, total, expected", [
    ([0, 10, 11], 12, [1, 11, 12]),  # ddp_first_run: "step 0", "step 10", "step 11" of 12
    ([1, 2, 3], 3, [1, 2, 3]),  # "step 1/3" ... counted from 1
    ([0, 5, 9, 12], 10, [1, 6, 10, 10]),  # never past the total
])  # fmt: skip
def test_steps_done_counts_from_zero_or_one(lines, total, expected):
    assert [steps_done(step, lines[0], total) for step in lines] == expected


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10", True])
def test_bad_progress_is_refused_before_any_run(setup, bad):
    with pytest.raises(ValueError, match=r"progress=.*number of steps"):
        coursekit.run_launcher(STEPS_LIVE, setup=setup, progress=bad)
    assert not setup.runs_dir.exists()


STEPS_200 = """
import argparse, json, os
import torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--device")
p.add_argument("--out")
args = p.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"hello from rank {rank}", flush=True)
for step in range(1, 201):
    print(f"step {step}/200 loss {1 / step:.4f}" if rank == 0 else f"rank {rank} did {step}",
          flush=True)
if rank == 0:
    os.makedirs(args.out, exist_ok=True)
    json.dump({"steps": 200}, open(os.path.join(args.out, "metrics.json"), "w"))
dist.barrier()
dist.destroy_process_group()
"""


def test_a_brief_headless_launch_prints_a_dozen_lines(setup, tmp_path, capsys, monkeypatch):
    """200 step lines from rank 0 and 200 lines from rank 1 become: the command, rank 0's
    other line, a sample of the step lines (the first, every 50th) and the closing line."""
    monkeypatch.setenv(HEADLESS_ENV, "1")
    script = tmp_path / "steps_200.py"
    script.write_text(STEPS_200)
    run = coursekit.run_launcher(script, setup=setup, nproc=2)  # echo="brief": the default
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert run.ok and len(run.rank_lines(0)) == 201 and len(run.rank_lines(1)) == 201
    assert len(lines) <= 12, printed.out
    assert lines[0].startswith("$ torchrun --standalone --nproc-per-node 2")
    assert lines[1] == "hello from rank 0"
    steps = [t for t in lines if t.startswith("step ")]
    assert steps[0].startswith("step 1/200") and steps[-1].startswith("step 200/200")
    assert 3 <= len(steps) <= live.MAX_STEP_LINES
    assert not any("rank 1" in t for t in lines)  # other ranks stay in the log
    assert lines[-1] == (f"steps_200: 2 ranks, {run.seconds:.1f} s, {len(run.lines)} lines in "
                         f"{run.log_dir} (.log() of the returned run prints them)")  # fmt: skip
    assert "\r" not in printed.out + printed.err and printed.err == ""  # no tqdm headless


def feed(echo: live.Echo, lines):
    for rank, text in lines:
        echo.line(rank, text)
    echo.close(None)


@pytest.mark.parametrize("steps, progress, printed", [
    (range(1, 61), None, [1, 10, 20, 30, 40, 50, 60]),  # "step N/60": the total is in the line
    (range(0, 12), 12, [0, 1, 3, 5, 7, 9, 11]),  # counted from 0, total from progress=
    (range(10, 201, 10), None, [10, 50, 100, 150, 200]),  # a launcher printing every 10th
])  # fmt: skip
def test_brief_echo_samples_step_lines(steps, progress, printed, capsys, monkeypatch):
    monkeypatch.setenv(HEADLESS_ENV, "1")
    total = progress or steps[-1]
    fmt = "step {}" if progress else "step {}/" + str(total)
    feed(live.Echo("brief", "x", progress),
         [(0, fmt.format(s)) for s in steps] + [(1, "step 3 from rank 1"), (None, "torchrun")])
    shown = capsys.readouterr().out.splitlines()
    assert shown == [fmt.format(s) for s in printed]


def test_brief_echo_without_a_total_shows_powers_of_two(capsys, monkeypatch):
    monkeypatch.setenv(HEADLESS_ENV, "1")
    feed(live.Echo("brief", "x", None), [(0, f"step {s} loss 1") for s in range(1, 301)])
    shown = [int(t.split()[1]) for t in capsys.readouterr().out.splitlines()]
    assert shown == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]


def test_a_redrawn_line_keeps_what_it_showed_last():
    bar = "[rank0]:  5%|#   | 1/20\r 50%|#####| 10/20\r\n"  # tqdm in a launcher: never do this
    assert live._parse_hooked(bar)[:2] == (0, " 50%|#####| 10/20")
    assert live._parse_hooked("[rank1]:[rank1]: ValueError: x\n") == (1, "ValueError: x", True)


@pytest.mark.parametrize("bad", [True, "yes", None, 1, "ALL"])
def test_bad_echo_is_refused_before_any_run(setup, bad):
    with pytest.raises(ValueError, match=r"^echo=.*\"brief\".*\"all\".*echo=False"):
        coursekit.run_launcher(STEPS_LIVE, setup=setup, echo=bad)
    assert not setup.runs_dir.exists()


def test_brief_echo_leaves_tracebacks_to_the_failure_summary(capsys):
    """The failure's few lines (LauncherFailed, result.failure()) say it; brief does not print
    rank 0's whole traceback first, whether torch's excepthook marked its lines or not."""
    echo = live.Echo("brief", "x", None)
    echo.line(0, "hello")
    for text in ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>',
                 "    f()", "RuntimeError: marked by torch's excepthook", "its second line"]:
        echo.line(0, text, hooked=True)
    for text in ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>',
                 "    f()", "    ^^^", "ValueError: raised before init_process_group"]:
        echo.line(0, text)
    echo.line(0, "after")
    echo.close(None)
    assert capsys.readouterr().out.splitlines() == ["hello", "after"]
