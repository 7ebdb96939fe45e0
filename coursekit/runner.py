"""Run a launcher under torchrun from a notebook or a test, safely.

What this adds to a bare ``subprocess.run(["torchrun", ...])``:

- ``sys.executable -m torch.distributed.run``: the kernel's own Python, whatever PATH says;
- every rank's lines streamed live and whole, each marked with its rank (torchrun's
  ``--tee`` writes one log file per rank and copies whole lines from them), kept in
  ``result.lines`` and ``RUN_DIR/output.log``; what is printed is a reader's share of them
  (``echo="brief"``: the command, rank 0's lines, a sample of its ``step N`` lines or a
  progress bar, one closing line; ``"all"``; ``False``), ``result.log()`` prints the rest;
- ``TIMEOUT_S`` enforced; on timeout, failure, a kernel interrupt or the kernel's exit
  the whole process tree is killed (workers run in sessions of their own, so killing
  torchrun's process group alone would leave them behind), and torchrun runs under a small
  guard (``guard.py``) that also catches the workers of a torchrun that died early;
- on failure an error that says in a few lines which rank failed first, how (its exit code
  explained, its exception whole, the key line of its traceback) and where the logs are;
- torchrun's log files kept in the run's own directory, a free port for every run
  (``--standalone``), so two runs can proceed at once.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .config import Setup

RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:(\[rank\1\]: ?)?")  # group 2: torch's excepthook
ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
ROOT_CAUSE_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
STEP_LINE = re.compile(r"^\s*step\s+(\d+)(?:\s*/\s*(\d+))?")  # "step 12 ...", "step 12/60 ..."
FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
# What a rank prints when torch 2.13 aborts it while its interpreter shuts down, after its
# work is done (seen in core dumps here): the gloo process group outlived
# destroy_process_group, and one of its threads, still releasing the last collective's
# tensors, needed the GIL during finalization. The launchers now prevent both causes (see
# launchers/ddp_first_run.py); this stays tolerated, loudly, for launchers written otherwise.
TEARDOWN_ABORT = "terminate called without an active exception"
GRACE_S = 3.0  # how long torchrun gets to stop its workers before everything is killed
ECHO_VALUES = ("brief", "all", False)
HEADLESS_ENV = "COURSEKIT_HEADLESS"  # "1": no front end will draw a widget (verify, tests)
NOTHING = "(none: it printed nothing)"
MAX_STEP_LINES = 8  # step lines a brief launch prints (plus its first and its last)

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

_live: set[subprocess.Popen] = set()


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
        path = self.out_dir / "metrics.json"
        if not path.exists():
            raise FileNotFoundError(f"{self.name} wrote no {path} (did rank 0 reach the end?)")
        return json.loads(path.read_text())

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
            last = self.rank_lines(0)[-1:] or [t for _, t in self.lines][-1:]
            limit = f"TIMEOUT_S={self.timeout_s:g} s" if self.timeout_s else "its timeout"
            return "\n".join([
                f"{self.name} ran past {limit} and was stopped; all its processes were killed "
                f"(raise TIMEOUT_S if it was only slow, else it hung: a rank waiting in a "
                f"collective its partners never joined)",
                "  last line of rank 0: " + (repr(last[0]) if last else NOTHING),
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


def _parse_hooked(raw: str) -> tuple[int | None, str, bool]:
    text = raw.rstrip("\n")
    if m := RANK_PREFIX.match(text):  # the prefix first: a redrawn line has it only once
        return int(m.group(1)), _strip_cr(text[m.end() :]), m.group(2) is not None
    return None, _strip_cr(text), False


def _parse(raw: str) -> tuple[int | None, str]:
    rank, text, _ = _parse_hooked(raw)
    return rank, text


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


def _die_with_parent() -> None:
    """In the guard: get SIGTERM if the kernel that started us dies (Linux only)."""
    PR_SET_PDEATHSIG = 1  # noqa: N806 - the kernel's name for it
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


_libc = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def _kill_tree(proc: subprocess.Popen, known: dict[int, psutil.Process]) -> None:
    """SIGTERM the guard (it stops torchrun and its workers), then SIGKILL whatever is left."""
    try:
        known.update({c.pid: c for c in psutil.Process(proc.pid).children(recursive=True)})
    except psutil.NoSuchProcess:
        pass
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    survivors = [p for p in known.values() if p.is_running()]
    if proc.poll() is None:
        proc.kill()
    for p in survivors:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(survivors, timeout=GRACE_S)
    proc.wait()


@atexit.register
def _kill_all_live() -> None:
    for proc in list(_live):
        _kill_tree(proc, {})


def _read_lines(stream, sink: queue.Queue) -> None:
    for raw in iter(stream.readline, b""):
        sink.put(raw.decode("utf-8", errors="replace"))
    sink.put(None)


def run_launcher(
    script: str | os.PathLike,
    args: Sequence[object] = (),
    *,
    setup: Setup,
    nproc: int | None = None,
    timeout_s: float | None = None,
    name: str | None = None,
    rendezvous: Sequence[str] = ("--standalone",),
    torchrun_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    check: bool = True,
    echo: str | bool = "brief",
    on_line: Callable[[int | None, str], None] | None = None,
    progress: int | None = None,
    stop: threading.Event | None = None,
) -> RunResult:
    """Run ``torchrun --nproc-per-node N script args`` and return what it did.

    The launcher gets ``--device`` (the tier's) and ``--out RUN_DIR/out`` unless ``args``
    already has them. ``check=False`` returns a failed run instead of raising, for lessons
    that fail on purpose (``result.failure()`` says why in a few lines).

    ``echo``: ``"brief"`` (default) prints the command, rank 0's lines, a sample of its
    ``step N`` lines (at most about 8, plus the last) and one closing line; other ranks' and
    torchrun's lines stay in ``result.log()`` and the run directory. ``"all"`` prints every
    line of every rank, labelled ``[rankN]``. ``False`` prints nothing.
    ``progress=STEPS``: with a front end, a live bar (a widget in Jupyter) follows rank 0's
    ``step N`` lines, N counted from 0 or 1, instead of the sample; headless
    (``COURSEKIT_HEADLESS=1``) it sets the sample's spacing.

    Each rank gets ``OMP_NUM_THREADS`` (the environment's, else the cores split between the
    ranks), and ``OMP_WAIT_POLICY=PASSIVE`` where the ranks' threads outnumber the cores and
    the environment does not choose a policy.
    """
    check_echo(echo)
    if progress is not None and (isinstance(progress, bool) or not isinstance(progress, int)
                                 or progress < 1):
        raise ValueError(f"progress={progress!r}: give the launcher's number of steps (1 or more)")
    script = Path(script)
    if not script.exists():
        raise FileNotFoundError(f"launcher {script} does not exist: run its %%writefile cell")
    nproc = setup.nproc if nproc is None else nproc
    name = name or script.stem
    run_dir = fresh_run_dir(setup, name)
    args = [str(a) for a in args]
    if "--device" not in args:
        args += ["--device", setup.device]
    if "--out" not in args:
        args += ["--out", str(run_dir / "out")]
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        *rendezvous, "--nproc-per-node", str(nproc),
        "--log-dir", str(run_dir / "logs"), "--tee", "3",
        *torchrun_args, str(script), *args,
    ]  # fmt: skip
    torchrun_env = {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, os.cpu_count() // nproc))),
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:",
        **(env or {}),
    }
    threads = nproc * int(torchrun_env["OMP_NUM_THREADS"])
    if threads > os.cpu_count() and "OMP_WAIT_POLICY" not in {**os.environ, **torchrun_env}:
        # more OpenMP threads than cores: a thread that spins while it waits for its team
        # holds the core a descheduled teammate needs (2 ranks x 2 threads on 2 cores: the
        # proof of notebook 05 took 70 s spinning, 14 s passive; the same sums either way)
        torchrun_env["OMP_WAIT_POLICY"] = "PASSIVE"
    return run_command(
        cmd, setup=setup, name=name, run_dir=run_dir, nproc=nproc, timeout_s=timeout_s,
        env=torchrun_env, check=check, echo=echo, on_line=on_line,
        shown=["torchrun", *cmd[3:]], stop=stop, progress=progress, script=str(script),
    )  # fmt: skip


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


def fresh_run_dir(setup: Setup, name: str) -> Path:
    """An empty ``RUNS_DIR/name`` for one run: its logs, its ``--out`` and its scratch files."""
    run_dir = setup.runs_dir / name
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "logs").mkdir(parents=True)
    return run_dir


def run_command(
    cmd: Sequence[str],
    *,
    setup: Setup,
    name: str,
    run_dir: Path | None = None,
    nproc: int = 1,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    echo: str | bool = "brief",
    on_line: Callable[[int | None, str], None] | None = None,
    shown: Sequence[str] | None = None,
    stop: threading.Event | None = None,
    progress: int | None = None,
    script: str | None = None,
) -> RunResult:
    """Run any command with the runner's guarantees: live lines, timeout, no survivors.

    ``echo`` as in :func:`run_launcher`; for a command that is not torchrun, "brief" shows
    its own (unlabelled) lines as it would rank 0's. ``stop``, when set by another thread,
    ends the run early (its whole tree is killed).
    """
    check_echo(echo)
    timeout_s = setup.timeout_s if timeout_s is None else timeout_s
    run_dir = run_dir or fresh_run_dir(setup, name)
    torchrun = "torch.distributed.run" in cmd or Path(cmd[0]).name == "torchrun"
    result = RunResult(name=name, cmd=list(cmd), nproc=nproc, run_dir=run_dir, script=script,
                       timeout_s=timeout_s, torchrun=torchrun)  # fmt: skip
    shower = Echo(echo, name, progress, main_rank=0 if torchrun else None)
    shower.command(shown or cmd)

    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "coursekit.guard", *cmd],  # nothing outlives it: see guard.py
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        start_new_session=True,
        preexec_fn=_die_with_parent if _libc else None,
    )
    _live.add(proc)
    known: dict[int, psutil.Process] = {}
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    next_scan = 0.0
    finished = False
    try:
        while True:
            now = time.monotonic()
            if now - start > timeout_s:
                result.timed_out = True
                break
            if stop is not None and stop.is_set():
                break
            if now >= next_scan:  # remember every descendant, so none can escape the kill
                try:
                    kids = psutil.Process(proc.pid).children(recursive=True)
                    known.update({c.pid: c for c in kids})
                except psutil.NoSuchProcess:
                    pass
                next_scan = now + 0.5
            try:
                raw = lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if raw is None:  # torchrun closed its output: it is exiting
                try:
                    proc.wait(timeout=max(0.1, timeout_s - (time.monotonic() - start)))
                except subprocess.TimeoutExpired:
                    result.timed_out = True
                break
            rank, text, hooked = _parse_hooked(raw)
            result.lines.append((rank, text))
            result.hooked.append(hooked)
            shower.line(rank, text, hooked)
            if on_line:
                on_line(rank, text)
        finished = True
    finally:
        _kill_tree(proc, known)
        _live.discard(proc)
        reader.join(timeout=1)
        result.seconds = time.monotonic() - start
        result.returncode = proc.returncode
        summary = {k: getattr(result, k) for k in ("cmd", "nproc", "returncode", "seconds")}
        (run_dir / "run.json").write_text(json.dumps({**summary, "timed_out": result.timed_out}))
        (run_dir / "output.log").write_text(result.log() + "\n")
        shower.close(result if finished else None)
        if echo and not finished:  # an interrupt (the stop button) or an error in here
            print(f"{name}: stopped after {result.seconds:.1f} s, all its processes killed; "
                  f"{len(result.lines)} lines in {result.log_dir}", flush=True)

    if result.timed_out:
        raise LauncherTimeout(result.failure(), result)
    if result.aborted_at_exit_only:
        print(f"WARNING: rank {result.failed_rank()} finished its work, then aborted while exiting "
              f"({TEARDOWN_ABORT!r}): a known teardown race in torch, not in {name}; its results "
              "stand.", flush=True)  # fmt: skip
    if check and not result.ok:
        raise LauncherFailed(result.failure(), result)
    return result
