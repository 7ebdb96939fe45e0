"""run_launcher(progress=STEPS): a bar that follows rank 0's "step N" lines.

In a notebook tqdm.auto draws a widget (the browser test watches it move); here, outside
Jupyter, the same bar is text on stderr.
"""

import re

import pytest
from conftest import ROOT

import coursekit
from coursekit.runner import steps_done

STEPS_LIVE = ROOT / "tests" / "browser" / "steps_live.py"


def last_bar(stderr: str) -> str:
    return [part for part in stderr.replace("\r", "\n").splitlines() if "step" in part][-1]


def test_progress_follows_steps_counted_from_one(setup, capsys):
    run = coursekit.run_launcher(STEPS_LIVE, ["--steps", 5, "--interval", 0.3], setup=setup,
                                 nproc=2, progress=5)  # fmt: skip
    assert run.ok and len([t for t in run.rank_lines(0) if t.startswith("step")]) == 5
    err = capsys.readouterr().err
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
