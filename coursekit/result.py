"""What a launched run did, and why it failed: the failure report.

A :class:`RunResult` keeps every line of every rank (``.log()``), rank 0's metrics, and says
in a few lines which rank failed first, how it left (its exit code in words), its exception
and the line of the launcher it came from (``.failure()``), from torchrun's own summary and
the ranks' logs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
ROOT_CAUSE_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
STACK_FRAME = re.compile(r'^\s*File "(.+)", line (\d+) in (.+)$')  # faulthandler's, no comma
# What a rank prints when torch 2.13 aborts it while its interpreter shuts down, after its
# work is done (seen in core dumps here): the gloo process group outlived
# destroy_process_group, and one of its threads, still releasing the last collective's
# tensors, needed the GIL during finalization. The launchers now prevent both causes (see
# launchers/ddp_first_run.py); this stays tolerated, loudly, for launchers written otherwise.
TEARDOWN_ABORT = "terminate called without an active exception"
NOTHING = "(none: it printed nothing)"
# How a rank fails when gloo's TCP pairs do not connect while the group forms: seen once in a
# whole CI run of the suite, on a launcher that only prints ("Connection closed by peer"), a
# transient known from torch's own CI (pytorch/pytorch#53270)
GLOO_CONNECT_FAILED = "Gloo connectFullMesh failed"

SIGNAL_MEANING = {
    "SIGKILL": "killed by SIGKILL: often the out-of-memory killer, or a kill -9",
    "SIGTERM": "stopped by SIGTERM (torchrun stops the other ranks so when one fails)",
    "SIGABRT": "aborted (SIGABRT) in native code: a C++ abort, e.g. an uncaught c10::Error "
               "or 'terminate called ...'",
    "SIGSEGV": "crashed with a segmentation fault (SIGSEGV) in native code",
    "SIGBUS": "crashed with a bus error (SIGBUS) in native code: often shared memory "
              "(/dev/shm) too small",
    "SIGINT": "interrupted (SIGINT)",
}

def exit_meaning(code: int | None, traceback_seen: bool) -> str:
    """What a rank's (or torchrun's) exit code says, in words."""
    if code is None:
        return "no exit code: it was still running when it was stopped"
    signum = -code if code < 0 else code - 128 if 128 < code < 160 else None
    if signum is not None:
        try:
            sig = signal.Signals(signum).name
        except ValueError:
            sig = f"signal {signum}"
        how = SIGNAL_MEANING.get(sig, f"ended by {sig}")
        shown = f"{code} (signal {signum})" if code < 0 else f"{code} (= 128 + {signum})"
        return f"exit code {shown}: {how}; no Python traceback"
    if traceback_seen:
        return f"exit code {code}: a Python exception"
    return (f"exit code {code}: no Python traceback: the process exited through "
            f"os._exit({code}) or sys.exit({code}), or died in native code")


class LauncherFailed(RuntimeError):
    """A launched run exited with an error; ``.result`` holds everything it printed."""

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result


class LauncherTimeout(LauncherFailed):
    """A launched run went past its timeout and was killed with all its processes."""


@dataclass
class Traceback:
    """The last Python traceback in one rank's lines."""

    exception: list[str]  # the exception's type and message, whole (every line of it)
    frames: list[tuple[str, int, str, str]]  # (file, line, function, source), outermost first

    def key_frame(self, script: str | None) -> tuple[str, int, str, str] | None:
        """The deepest frame in the launcher, else the deepest outside Python and torch."""
        if not self.frames:
            return None
        if script:
            mine = [f for f in self.frames if _same_file(f[0], script)]
            if mine:
                return mine[-1]
        outside = [f for f in self.frames if not _library_file(f[0])]
        return (outside or self.frames)[-1]


def _source_line(file: str, line: int) -> str:
    try:
        return Path(file).read_text().splitlines()[line - 1].strip()
    except (OSError, IndexError, UnicodeDecodeError):
        return "(source not readable)"


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def _library_file(path: str) -> bool:
    return path.startswith("<") or "site-packages" in path or path.startswith(sys.base_prefix)


def parse_traceback(lines: Sequence[str], hooked: Sequence[bool] | None = None) -> Traceback | None:
    """The last traceback in ``lines``. ``hooked[i]``: line i came through torch's excepthook
    (every traceback after init_process_group does): then only such lines are its own, which
    keeps out the rank's stdout lines that torchrun's --tee interleaves with its stderr."""
    starts = [i for i, t in enumerate(lines) if t.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    lines = list(lines[starts[-1] + 1 :])
    if hooked is not None and hooked[starts[-1]]:
        marks = hooked[starts[-1] + 1 :]
        lines = [t for t, h in zip(lines, marks, strict=True) if h or not t.strip()]
    i, frames = 0, []
    while i < len(lines):
        text = lines[i]
        if m := FRAME.match(text):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            source = nxt.strip() if nxt.startswith("    ") and not FRAME.match(nxt) else ""
            frames.append((m.group(1), int(m.group(2)), m.group(3), source))
        elif not (text.startswith(" ") or not text.strip()):  # not a source line or ^^^^
            break
        i += 1
    exception = [t for t in lines[i:] if t != TEARDOWN_ABORT]
    while exception and not exception[-1].strip():
        exception.pop()
    return Traceback(exception=exception, frames=frames)


def read_metrics(name: str, out_dir: Path) -> dict:
    """What rank 0 of run ``name`` wrote to ``out_dir/metrics.json``, or an error that says it
    wrote none."""
    path = out_dir / "metrics.json"
    if not path.exists():
        raise FileNotFoundError(f"{name} wrote no {path} (did rank 0 reach the end?)")
    return json.loads(path.read_text())


@dataclass
class RunResult:
    name: str
    cmd: list[str]
    nproc: int
    run_dir: Path
    returncode: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    lines: list[tuple[int | None, str]] = field(default_factory=list)  # (rank or None, text)
    hooked: list[bool] = field(default_factory=list)  # lines[i] came via torch's excepthook
    script: str | None = None  # the launcher, for the key line of a traceback
    timeout_s: float | None = None
    torchrun: bool = True  # False: run_command ran something else (its lines have no rank)
    asked_where: bool = False  # at its timeout the ranks were asked to print their stacks

    @property
    def out_dir(self) -> Path:
        """The launcher's ``--out`` folder (run_launcher passes RUN_DIR/out unless told)."""
        if "--out" in self.cmd[:-1]:
            return Path(self.cmd[self.cmd.index("--out") + 1])
        return self.run_dir / "out"

    @property
    def log_dir(self) -> Path:
        """torchrun's per-rank logs (``--log-dir``); ``output.log`` beside it has every line."""
        return self.run_dir / "logs"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 or self.aborted_at_exit_only

    @property
    def aborted_at_exit_only(self) -> bool:
        """The work finished (rank 0 wrote metrics.json) and the only failure is a rank that
        aborted while its interpreter shut down (TEARDOWN_ABORT), with no Python error."""
        if self.returncode in (0, None) or self.timed_out:
            return False
        if not (self.out_dir / "metrics.json").exists():
            return False
        failed = self.failed_rank()
        own = self.rank_lines(failed) if failed is not None else []
        return TEARDOWN_ABORT in own[-3:] and not any(t.startswith("Traceback") for t in own)

    @property
    def gloo_connect_failed(self) -> bool:
        """No work done (no metrics.json) and the failing rank's error is gloo's connect
        failing while its process group formed (GLOO_CONNECT_FAILED)."""
        if self.ok or self.timed_out or (self.out_dir / "metrics.json").exists():
            return False
        traceback = self.traceback()
        return traceback is not None and any(GLOO_CONNECT_FAILED in t for t in traceback.exception)

    def rank_lines(self, rank: int) -> list[str]:
        return [text for r, text in self.lines if r == rank]

    def _rank_hooked(self, rank: int) -> list[bool]:
        hooked = self.hooked if len(self.hooked) == len(self.lines) else [False] * len(self.lines)
        return [h for (r, _), h in zip(self.lines, hooked, strict=True) if r == rank]

    @property
    def output(self) -> str:
        return self.log()

    def log(self, rank: int | None = None) -> str:
        """Everything the run printed: every line labelled ``[rankN]`` (torchrun's own lines
        unlabelled), or only rank ``rank``'s lines, as it printed them."""
        if rank is not None:
            return "\n".join(self.rank_lines(rank))
        return "\n".join(_label(r, text) for r, text in self.lines)

    @property
    def metrics(self) -> dict:
        """What rank 0 wrote to ``--out DIR/metrics.json``."""
        return read_metrics(self.name, self.out_dir)

    def _root_cause_field(self, pattern: re.Pattern) -> int | None:
        torchrun_lines = [text for r, text in self.lines if r is None]
        for i, text in enumerate(torchrun_lines):
            if text.startswith("Root Cause"):
                for later in torchrun_lines[i + 1 :]:
                    if m := pattern.match(later):
                        return int(m.group(1))
        return None

    def failed_rank(self) -> int | None:
        """The rank torchrun's summary names as the root cause, if any."""
        return self._root_cause_field(ROOT_CAUSE_RANK)

    def failed_exitcode(self) -> int | None:
        """The exit code of that rank, as torchrun's summary gives it (negative: a signal)."""
        return self._root_cause_field(ROOT_CAUSE_EXIT)

    def traceback(self, rank: int | None = None) -> Traceback | None:
        """The last Python traceback of ``rank`` (default: the failing rank; torchrun's own
        where no rank failed)."""
        rank = self.failed_rank() if rank is None else rank
        if rank is None:
            return parse_traceback([t for r, t in self.lines if r is None])
        if (own := self._stderr_log(rank)) is not None:  # in order, without stdout lines
            return parse_traceback(own)
        return parse_traceback(self.rank_lines(rank), self._rank_hooked(rank))

    def _stderr_log(self, rank: int) -> list[str] | None:
        """Rank ``rank``'s stderr as torchrun's --log-dir kept it (latest attempt), its
        excepthook prefix removed; None where there is no such file."""
        local = rank
        torchrun_lines = [text for r, text in self.lines if r is None]
        for text in torchrun_lines:
            if (m := re.match(r"^\s*rank\s*:\s*(\d+) \(local_rank: (\d+)\)", text)) and int(
                    m.group(1)) == rank:
                local = int(m.group(2))
        files = sorted(self.log_dir.glob(f"*/attempt_*/{local}/stderr.log"),
                       key=lambda f: f.stat().st_mtime)
        if not files:
            return None
        raw = files[-1].read_text(errors="replace").splitlines()
        prefix = re.compile(rf"^\[rank{rank}\]: ?")
        return [_strip_cr(prefix.sub("", t)) for t in raw]

    def root_cause(self) -> str:
        """The failing rank's own traceback (whole), as torchrun's summary names it; where it
        left none, :meth:`failure` (which says how it left). Prefer ``failure()``: short."""
        failed_rank = self.failed_rank()
        own = self.rank_lines(failed_rank) if failed_rank is not None else []
        starts = [i for i, text in enumerate(own) if text.startswith("Traceback")]
        if not starts:
            return self.failure()
        return f"rank {failed_rank} failed first:\n" + "\n".join(own[starts[-1] :])

    def failure(self) -> str:
        """Why the run failed, in a few lines: which rank failed first, its exit code and
        what it means, its exception (whole) and the key line of its traceback, where the
        whole log is. Empty for a run that did not fail."""
        logs = self.log_dir if self.torchrun else self.run_dir / "output.log"
        where = f"whole log: {logs} ({self.log_hint()})"
        if self.timed_out:
            limit = f"its limit of {self.timeout_s:g} s" if self.timeout_s else "its limit"
            stood = self.where_ranks_stood()
            if stood:
                places = [f"  rank {r}: {stood[r]}" if r in stood
                          else f"  rank {r}: (no stack: it had ended, or could not print)"
                          for r in range(self.nproc)]  # fmt: skip
            else:
                last = self.rank_lines(0)[-1:] or [t for _, t in self.lines][-1:]
                places = ["  last line of rank 0: " + (repr(last[0]) if last else NOTHING)]
            return "\n".join([
                f"{self.name} ran past {limit} and was stopped; all its processes were killed "
                f"(if it was only slow, give it more time: TIMEOUT_S, or the timeout_s its "
                f"cell passes; else it hung: a rank waiting in a collective its partners never "
                f"joined)" + (". Where each rank stood:"
                                                            if stood else ""),
                *places,
                where,
            ])  # fmt: skip
        if self.ok:
            return ""
        rank = self.failed_rank()
        code = self.failed_exitcode() if rank is not None else self.returncode
        tb = self.traceback(rank)
        who = (f"rank {rank} failed first (of {self.nproc})" if rank is not None
               else "torchrun failed before any rank reported a failure" if self.torchrun
               else "the command failed")
        lines = [f"{self.name} failed: {who}, {exit_meaning(code, tb is not None)}"]
        if tb is not None:
            lines += ["  " + t for t in tb.exception] or ["  (the traceback had no exception line)"]
            if (key := tb.key_frame(self.script)) is not None:
                file, line, func, source = key
                at = f"  at {_short(file)}:{line} in {func}"
                lines.append(at + (f": {source}" if source else ""))
        else:
            own = [t for r, t in self.lines if r == rank and t.strip()]
            lines.append("  its last line: " + (repr(own[-1]) if own else NOTHING))
        lines.append(where)
        return "\n".join(lines)

    def where_ranks_stood(self) -> dict[int, str]:
        """Rank -> where it was when the run was stopped at its timeout: the innermost frame
        of the launcher (else outside Python and torch) in the stacks each rank printed then
        (faulthandler's "File ..., line N in f" lines, innermost first)."""
        where = {}
        for rank in range(self.nproc):
            own = self.rank_lines(rank)
            starts = [i for i, t in enumerate(own) if t.endswith("(most recent call first):")]
            if not starts:
                continue
            frames = [m.groups() for t in own[starts[0]:] if (m := STACK_FRAME.match(t))]
            mine = [f for f in frames if self.script and _same_file(f[0], self.script)]
            outside = [f for f in frames if not _library_file(f[0])]
            if chosen := (mine or outside or frames)[:1]:
                file, line, func = chosen[0]
                where[rank] = f"{_short(file)}:{line} in {func}: {_source_line(file, int(line))}"
        return where

    def log_hint(self) -> str:
        rank = self.failed_rank()
        if rank is None:
            return ".log() of the returned run prints them"
        return f".log({rank}) of the returned run prints rank {rank}'s lines"

    def closing_line(self) -> str:
        state = "" if self.ok else (" TIMED OUT," if self.timed_out else " FAILED,")
        if not self.torchrun:
            return (f"{self.name}: {self.seconds:.1f} s,{state} {len(self.lines)} lines in "
                    f"{self.run_dir / 'output.log'} (.log() of the returned run prints them)")
        return (f"{self.name}: {self.nproc} ranks, {self.seconds:.1f} s,{state} {len(self.lines)} "
                f"lines in {self.log_dir} (.log() of the returned run prints them)")


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if len(rel) < len(path) else path


def _label(rank: int | None, text: str) -> str:
    return text if rank is None else f"[rank{rank}] {text}"


def _strip_cr(text: str) -> str:
    """A line redrawn in place (tqdm's carriage returns): only what it showed last."""
    if "\r" not in text:
        return text
    parts = [part for part in text.split("\r") if part.strip()]
    return parts[-1] if parts else ""


