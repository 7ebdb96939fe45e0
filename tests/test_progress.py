"""run_launcher(progress=STEPS): a bar that follows rank 0's "step N" lines.

In a notebook tqdm.auto draws a widget (the browser test watches it move); here, outside
Jupyter, the same bar is text on stderr.
"""

import re

import pytest
from conftest import ROOT

import coursekit

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


def test_progress_follows_steps_counted_from_zero(setup, capsys):
    """ddp_first_run prints "step 0", "step 10", "step 11" for 12 steps: the bar ends at 12."""
    run = coursekit.run_launcher(ROOT / "launchers" / "ddp_first_run.py", ["--steps", 12],
                                 setup=setup, nproc=2, progress=12)  # fmt: skip
    assert run.ok
    err = capsys.readouterr().err
    assert "12/12" in last_bar(err) and re.search(r" ([1-9]|1[01])/12 ", err), err


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10", True])
def test_bad_progress_is_refused_before_any_run(setup, bad):
    with pytest.raises(ValueError, match=r"progress=.*number of steps"):
        coursekit.run_launcher(STEPS_LIVE, setup=setup, progress=bad)
    assert not setup.runs_dir.exists()
