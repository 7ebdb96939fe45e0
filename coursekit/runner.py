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
  explained, its exception whole, the key line of its traceback) and where the logs are
  (the failure report: ``result.py``; what is shown while it runs: ``echo.py``);
- torchrun's log files kept in the run's own directory, a free port for every run
  (``--standalone``), so two runs can proceed at once;
- a one-machine run whose rank failed in gloo's connect while the group formed, before any
  work (``result.GLOO_CONNECT_FAILED``), launched once more, with a WARNING that says so.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from . import replay
from .config import Setup
from .echo import Echo, _parse_hooked, check_echo
from .result import GLOO_CONNECT_FAILED, TEARDOWN_ABORT, LauncherFailed, LauncherTimeout, RunResult

GRACE_S = 3.0  # how long torchrun gets to stop its workers before everything is killed

_live: set[subprocess.Popen] = set()


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


STACKS = Path(__file__).resolve().parent / "stacks"  # its sitecustomize: stacks on SIGUSR1
WHERE_WAIT_S = 2.0  # how long the ranks get to print their stacks before the kill


def _run_environment(extra: dict[str, str] | None) -> dict[str, str]:
    """The run's environment: unbuffered output, and every Python process of it ready to print
    its stacks on SIGUSR1 (coursekit/stacks/sitecustomize.py)."""
    path = os.pathsep.join(p for p in (str(STACKS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(extra or {})}


def _ask_where_ranks_stand(proc: subprocess.Popen, lines: queue.Queue, result: RunResult) -> None:
    """SIGUSR1 to every rank (torchrun's children): each prints its threads' stacks; their
    lines are kept in ``result`` as they arrive, for WHERE_WAIT_S at most."""
    try:
        (agent,) = psutil.Process(proc.pid).children()
        ranks = agent.children()
    except (ValueError, psutil.Error):
        return
    for rank in ranks:
        try:
            rank.send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    result.asked_where = True
    deadline = time.monotonic() + WHERE_WAIT_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            raw = lines.get(timeout=min(0.2, left))
        except queue.Empty:
            continue
        if raw is None:
            break
        rank, text, hooked = _parse_hooked(raw)
        result.lines.append((rank, text))
        result.hooked.append(hooked)


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
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torchrun_env = {  # the cores this process may use (a class seat is pinned to some)
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, cores // nproc))),
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:",
        **(env or {}),
    }
    threads = nproc * int(torchrun_env["OMP_NUM_THREADS"])
    if threads > cores and "OMP_WAIT_POLICY" not in {**os.environ, **torchrun_env}:
        # more OpenMP threads than cores: a thread that spins while it waits for its team
        # holds the core a descheduled teammate needs (2 ranks x 2 threads on 2 cores: the
        # proof of notebook 05 took 70 s spinning, 14 s passive; the same sums either way)
        torchrun_env["OMP_WAIT_POLICY"] = "PASSIVE"
    return run_command(
        cmd, setup=setup, name=name, run_dir=run_dir, nproc=nproc, timeout_s=timeout_s,
        env=torchrun_env, check=check, echo=echo, on_line=on_line,
        shown=["torchrun", *cmd[3:]], stop=stop, progress=progress, script=str(script),
    )  # fmt: skip


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

    def attempt() -> tuple[RunResult, Echo]:
        result = RunResult(name=name, cmd=list(cmd), nproc=nproc, run_dir=run_dir,
                           script=script, timeout_s=timeout_s, torchrun=torchrun)  # fmt: skip
        shower = Echo(echo, name, progress, main_rank=0 if torchrun else None)
        shower.command(shown or cmd)
        return result, shower

    result, shower = attempt()
    key = record = None
    if replay.enabled():  # the test suite's: an identical earlier launch is replayed
        key = replay.launch_key(cmd, env or {}, run_dir=run_dir, runs_dir=setup.runs_dir,
                                nproc=nproc, script=script)
        record = replay.recorded(key, timeout_s) if key else None
    if record is not None:
        _replay(record, key, result, shower, on_line, setup)
    else:
        _launch(cmd, env, result, shower, on_line, stop, echo)
        # one machine's run only: a node of a multi-node job cannot start again alone
        alone = torchrun and "--standalone" in cmd and not (stop is not None and stop.is_set())
        if alone and result.gloo_connect_failed:
            print(f"WARNING: {name}: rank {result.failed_rank()} could not connect gloo's "
                  f"process group ({GLOO_CONNECT_FAILED!r}), before any work: a transient of "
                  "gloo's TCP connect, not of the launcher; launching it once more.",
                  flush=True)  # fmt: skip
            shutil.rmtree(result.log_dir)
            result.log_dir.mkdir()
            result, shower = attempt()
            _launch(cmd, env, result, shower, on_line, stop, echo)
        if key and not (stop is not None and stop.is_set()):
            replay.record(key, result, setup.runs_dir)
    if result.timed_out:
        raise LauncherTimeout(result.failure(), result)
    if result.aborted_at_exit_only:
        print(f"WARNING: rank {result.failed_rank()} finished its work, then aborted while exiting "
              f"({TEARDOWN_ABORT!r}): a known teardown race in torch, not in {name}; its results "
              "stand.", flush=True)  # fmt: skip
    if check and not result.ok:
        raise LauncherFailed(result.failure(), result)
    return result


def _replay(record: dict, key: str, result: RunResult, shower: Echo, on_line, setup: Setup) -> None:
    """Show and return an identical launch's record as this run's (coursekit/replay.py)."""
    for rank, text in replay.restore(key, record, result.run_dir, setup.runs_dir):
        result.lines.append((rank, text))
        shower.line(rank, text, record["hooked"][len(result.lines) - 1])
        if on_line:
            on_line(rank, text)
    result.hooked = list(record["hooked"])
    for field in ("returncode", "seconds", "timed_out", "asked_where"):
        setattr(result, field, record[field])
    print(f"({result.name}: replayed: the same launch ran earlier in this test session, "
          f"{result.seconds:.1f} s; {replay.REPLAY_ENV} is set)", flush=True)
    shower.close(result)


def _launch(cmd, env, result: RunResult, shower: Echo, on_line, stop, echo) -> None:
    """Run ``cmd`` under the guard into ``result``: live lines, the limit, no survivors."""
    torchrun, timeout_s, run_dir = result.torchrun, result.timeout_s, result.run_dir
    name = result.name
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "coursekit.guard", *cmd],  # nothing outlives it: see guard.py
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_run_environment(env),
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
                if torchrun:  # before the kill: each rank prints where it waits
                    _ask_where_ranks_stand(proc, lines, result)
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
