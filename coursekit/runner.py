"""Run a launcher under torchrun from a notebook or a test, safely.

What this adds to a bare ``subprocess.run(["torchrun", ...])``:

- ``sys.executable -m torch.distributed.run``: the kernel's own Python, whatever PATH says;
- every rank's lines streamed live and whole, each marked with its rank (torchrun's
  ``--tee`` writes one log file per rank and copies whole lines from them);
- ``TIMEOUT_S`` enforced; on timeout, failure, a kernel interrupt or the kernel's exit
  the whole process tree is killed (workers run in sessions of their own, so killing
  torchrun's process group alone would leave them behind), and torchrun runs under a small
  guard (``guard.py``) that also catches the workers of a torchrun that died early;
- on failure an error that carries the failing rank's own traceback;
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

RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:(?:\[rank\1\]: ?)?")
ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
STEP_LINE = re.compile(r"^\s*step\s+(\d+)")  # "step 12 ...", "step 12/60 ...": a progress mark
# What a rank prints when torch 2.13 aborts it while its interpreter shuts down, after its
# work is done (seen in core dumps here): the gloo process group outlived
# destroy_process_group, and one of its threads, still releasing the last collective's
# tensors, needed the GIL during finalization. The launchers now prevent both causes (see
# launchers/ddp_first_run.py); this stays tolerated, loudly, for launchers written otherwise.
TEARDOWN_ABORT = "terminate called without an active exception"
GRACE_S = 3.0  # how long torchrun gets to stop its workers before everything is killed

_live: set[subprocess.Popen] = set()


class LauncherFailed(RuntimeError):
    """A launched run exited with an error; ``.result`` holds everything it printed."""

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result


class LauncherTimeout(LauncherFailed):
    """A launched run went past its timeout and was killed with all its processes."""


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

    @property
    def out_dir(self) -> Path:
        """The launcher's ``--out`` folder (run_launcher passes RUN_DIR/out unless told)."""
        if "--out" in self.cmd[:-1]:
            return Path(self.cmd[self.cmd.index("--out") + 1])
        return self.run_dir / "out"

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

    @property
    def output(self) -> str:
        return "\n".join(_label(r, text) for r, text in self.lines)

    @property
    def metrics(self) -> dict:
        """What rank 0 wrote to ``--out DIR/metrics.json``."""
        path = self.out_dir / "metrics.json"
        if not path.exists():
            raise FileNotFoundError(f"{self.name} wrote no {path} (did rank 0 reach the end?)")
        return json.loads(path.read_text())

    def failed_rank(self) -> int | None:
        """The rank torchrun's summary names as the root cause, if any."""
        torchrun_lines = [text for r, text in self.lines if r is None]
        for i, text in enumerate(torchrun_lines):
            if text.startswith("Root Cause"):
                for later in torchrun_lines[i + 1 :]:
                    if m := ROOT_CAUSE_RANK.match(later):
                        return int(m.group(1))
        return None

    def root_cause(self) -> str:
        """The failing rank's own traceback, as torchrun's summary names it."""
        failed_rank = self.failed_rank()
        if failed_rank is None:
            return "\n".join([text for r, text in self.lines if r is None][-20:])
        own = self.rank_lines(failed_rank)
        starts = [i for i, text in enumerate(own) if text.startswith("Traceback")]
        body = own[starts[-1] :] if starts else own[-15:]
        return f"rank {failed_rank} failed first:\n" + "\n".join(body)


def _label(rank: int | None, text: str) -> str:
    return text if rank is None else f"[rank{rank}] {text}"


def _parse(raw: str) -> tuple[int | None, str]:
    text = raw.rstrip("\n")
    if "\r" in text:  # a progress bar redrawn in place: keep what it showed last
        text = [part for part in text.split("\r") if part.strip()][-1:] or [""]
        text = text[0]
    if m := RANK_PREFIX.match(text):
        return int(m.group(1)), text[m.end() :]
    return None, text


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
    echo: bool = True,
    on_line: Callable[[int | None, str], None] | None = None,
    progress: int | None = None,
    stop: threading.Event | None = None,
) -> RunResult:
    """Run ``torchrun --nproc-per-node N script args`` and return what it did.

    The launcher gets ``--device`` (the tier's) and ``--out RUN_DIR/out`` unless ``args``
    already has them. ``check=False`` returns a failed run instead of raising, for lessons
    that fail on purpose. ``progress=STEPS`` shows a progress bar (a widget in Jupyter)
    that follows rank 0's lines starting with ``step N``, N counted from 0 or 1.
    """
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
    bar = None
    if progress is not None:
        from tqdm.auto import tqdm  # a widget in a notebook, text on stderr elsewhere

        bar = tqdm(total=progress, desc=name, unit="step", dynamic_ncols=True)
    first_step: list[int] = []  # a launcher that prints "step 0" counts from 0

    def each_line(rank: int | None, text: str) -> None:
        if bar is not None and rank == 0 and (m := STEP_LINE.match(text)):
            step = int(m.group(1))
            first_step[:] = first_step or [step]
            done = steps_done(step, first_step[0], progress)
            if done > bar.n:
                bar.update(done - bar.n)
        if on_line:
            on_line(rank, text)

    try:
        return run_command(
            cmd, setup=setup, name=name, run_dir=run_dir, nproc=nproc, timeout_s=timeout_s,
            env=torchrun_env, check=check, echo=echo, on_line=each_line,
            shown=["torchrun", *cmd[3:]], stop=stop,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()


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
    echo: bool = True,
    on_line: Callable[[int | None, str], None] | None = None,
    shown: Sequence[str] | None = None,
    stop: threading.Event | None = None,
) -> RunResult:
    """Run any command with the runner's guarantees: live lines, timeout, no survivors.

    ``stop``, when set by another thread, ends the run early (its whole tree is killed).
    """
    timeout_s = setup.timeout_s if timeout_s is None else timeout_s
    run_dir = run_dir or fresh_run_dir(setup, name)
    result = RunResult(name=name, cmd=list(cmd), nproc=nproc, run_dir=run_dir)
    if echo:
        print(f"$ {shlex.join(shown or cmd)}", flush=True)

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
            rank, text = _parse(raw)
            result.lines.append((rank, text))
            if echo:
                print(_label(rank, text), flush=True)
            if on_line:
                on_line(rank, text)
    finally:
        _kill_tree(proc, known)
        _live.discard(proc)
        reader.join(timeout=1)
        result.seconds = time.monotonic() - start
        result.returncode = proc.returncode
        summary = {k: getattr(result, k) for k in ("cmd", "nproc", "returncode", "seconds")}
        (run_dir / "run.json").write_text(json.dumps({**summary, "timed_out": result.timed_out}))

    if result.timed_out:
        raise LauncherTimeout(
            f"{name} ran past TIMEOUT_S={timeout_s:g} s and was stopped; all its processes "
            f"were killed. Raise TIMEOUT_S if it was only slow. Last lines:\n"
            + "\n".join(_label(r, t) for r, t in result.lines[-15:]),
            result,
        )
    if result.aborted_at_exit_only:
        print(f"WARNING: rank {result.failed_rank()} finished its work, then aborted while exiting "
              f"({TEARDOWN_ABORT!r}): a known teardown race in torch, not in {name}; its results "
              "stand.", flush=True)  # fmt: skip
    if check and not result.ok:
        raise LauncherFailed(
            f"{name} failed (exit code {result.returncode}) with {nproc} rank(s). "
            f"{result.root_cause()}",
            result,
        )
    return result
