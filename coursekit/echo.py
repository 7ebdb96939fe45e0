"""What a launch shows while it runs: the live echo of its lines and its progress.

``echo="brief"`` prints the command, rank 0's lines, a sample of its ``step N`` lines (a live
bar instead where a front end draws widgets) and one closing line; ``"all"`` every line of
every rank, labelled; ``False`` nothing. Headless (``COURSEKIT_HEADLESS=1``: verify, the
tests) no widget is drawn.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Sequence

from .result import RunResult, _label, _strip_cr

RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:(\[rank\1\]: ?)?")  # group 2: torch's excepthook
STEP_LINE = re.compile(r"^\s*step\s+(\d+)(?:\s*/\s*(\d+))?")  # "step 12 ...", "step 12/60 ..."
ECHO_VALUES = ("brief", "all", False)
HEADLESS_ENV = "COURSEKIT_HEADLESS"  # "1": no front end will draw a widget (verify, tests)
MAX_STEP_LINES = 8  # step lines a brief launch prints (plus its first and its last)


def check_echo(echo: object) -> None:
    """Refuse anything but the three ways a launch can print."""
    if isinstance(echo, bool) and echo is False:
        return
    if not isinstance(echo, str) or echo not in ECHO_VALUES:
        raise ValueError(
            f"echo={echo!r}: use echo=\"brief\" (the default: the command, rank 0's lines and "
            f"its progress, one closing line), echo=\"all\" (every line of every rank, "
            f"labelled [rankN]) or echo=False (nothing)"
        )


def headless() -> bool:
    """True where no front end draws widgets: ``COURSEKIT_HEADLESS=1`` (verify, the tests)."""
    return os.environ.get(HEADLESS_ENV, "") not in ("", "0")


def in_kernel() -> bool:
    """True inside a Jupyter kernel (a front end may draw widgets there)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    return getattr(shell, "kernel", None) is not None


def _parse_hooked(raw: str) -> tuple[int | None, str, bool]:
    text = raw.rstrip("\n")
    if m := RANK_PREFIX.match(text):  # the prefix first: a redrawn line has it only once
        return int(m.group(1)), _strip_cr(text[m.end() :]), m.group(2) is not None
    return None, _strip_cr(text), False



def sample_every(total: int) -> int:
    """The spacing k of the step lines a brief launch prints: a round number (1, 2, 5, 10,
    20, 25, 50, ...) such that the first step and every k-th make at most MAX_STEP_LINES."""
    target = total / (MAX_STEP_LINES - 1)
    scale = 1
    while True:
        for k in (1 * scale, 2 * scale, 25 * scale // 10, 5 * scale):
            if k >= target and k == int(k) and k >= 1:
                return int(k)
        scale *= 10


def steps_done(step: int, first_step: int, total: int) -> int:
    """Steps finished when rank 0 prints ``step <step>``: a launcher whose first step line
    said ``step 0`` counts from 0, so its ``step 9`` means ten steps done."""
    return min(total, step + (1 if first_step == 0 else 0))



class Echo:
    """What a launch prints as its lines arrive (see run_launcher's ``echo``)."""

    def __init__(self, mode, name: str, progress: int | None, main_rank: int | None = 0):
        self.mode, self.name, self.total, self.main = mode, name, progress, main_rank
        self.bar = None
        self.first_step: int | None = None
        self.printed_bucket = -1
        self.printed_power = 0
        self.last_step_line: str | None = None
        self.last_printed: str | None = None
        self.in_traceback = False
        if progress is not None:
            self._open_bar(progress)

    def _open_bar(self, total: int) -> None:
        """A live bar where a front end can draw it (a widget in JupyterLab); headless runs
        print a sample of the step lines instead."""
        if self.mode and not headless():
            from tqdm.auto import tqdm  # a widget in a notebook, text on stderr elsewhere

            self.bar = tqdm(total=total, desc=self.name, unit="step", dynamic_ncols=True)

    def command(self, shown: Sequence[str]) -> None:
        if self.mode:
            print(f"$ {shlex.join(shown)}", flush=True)

    def line(self, rank: int | None, text: str, hooked: bool = False) -> None:
        if not self.mode:
            return
        if self.mode == "all":
            print(_label(rank, text), flush=True)
        if rank != self.main or self._traceback(text, hooked):
            return
        if m := STEP_LINE.match(text):
            self._step(int(m.group(1)), int(m.group(2)) if m.group(2) else None, text)
        elif self.mode == "brief":
            print(text, flush=True)

    def _traceback(self, text: str, hooked: bool) -> bool:
        """A line of a traceback: "brief" leaves those to the failure's summary (the lines
        that came through torch's excepthook, and a traceback's header, frames and
        exception line)."""
        if hooked:
            return True
        if text.startswith("Traceback (most recent call last)"):
            self.in_traceback = True
            return True
        if self.in_traceback:
            if not text.strip() or text.startswith(" "):
                return True
            self.in_traceback = False  # the exception's line: the traceback ends here
            return True
        return False

    def _step(self, step: int, of: int | None, text: str) -> None:
        if self.first_step is None:
            self.first_step = step
        total = self.total or of
        # "step N/M" names its total: a bar where a notebook front end draws it as a widget
        if self.bar is None and total and self.total is None and in_kernel():
            self.total = total
            self._open_bar(total)
        done = steps_done(step, self.first_step, total) if total else step
        if self.bar is not None:
            if done > self.bar.n:
                self.bar.update(done - self.bar.n)
            return
        if self.mode != "brief":
            return
        self.last_step_line = text
        if total:  # the first step, then every k-th: at most MAX_STEP_LINES in all
            bucket = done // sample_every(total)
            show = bucket > self.printed_bucket
            if show:
                self.printed_bucket = bucket
        else:  # no total known: steps 1, 2, 4, 8, ... (about log2(steps) lines)
            show = done >= self.printed_power * 2 or self.printed_power == 0
            if show:
                self.printed_power = max(1, done)
        if show:
            print(text, flush=True)
            self.last_printed = text

    def close(self, result: RunResult | None) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.mode == "brief" and self.last_step_line not in (None, self.last_printed):
            print(self.last_step_line, flush=True)
        if self.mode and result is not None:
            print(result.closing_line(), flush=True)


