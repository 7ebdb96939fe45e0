"""Live ranks: a pool of N processes beside the kernel, their process group already formed,
that cells drive in a second (no torchrun start, no ``import torch`` per run).

    ranks = coursekit.live_ranks(setup, n=4)   # starts the pool (ipyparallel engines)
    %%ranks                                    # this cell runs on every rank, side by side
    t = torch.full((2,), float(rank)); dist.all_reduce(t); t
    %%ranks 0 2 --timeout 5                    # on ranks 0 and 2 only
    ranks.run("...")                           # the same, from code: each rank's outcome
    ranks.stop()                               # or the kernel's exit: nothing is left

Built on ipyparallel (the Jupyter project's engines and controller): each engine is one rank,
with ``rank``, ``world_size``, ``torch`` and ``dist`` in its namespace, which lives from cell to
cell. The process group is made with a short collective timeout (``timeout_s``, 3 s): a
cell where one rank skips a collective ends within seconds, says where each rank stood, and
the group is formed again, so the pool works on. Every process of the pool runs under
``coursekit.guard --orphan-exit``: when the kernel is gone (shut down, restarted, killed),
they are too.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import html
import io
import logging
import os
import shlex
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass

from .config import Setup
from .result import GLOO_CONNECT_FAILED

CELL = "<cell>"  # the file name a cell's code runs under on the ranks
_NAMESPACE: dict = {}  # on a rank: the names its cells define, kept from cell to cell
_POOLS: list[Ranks] = []  # in the kernel: the pools this kernel started


# ---- what runs on each rank (an ipyparallel engine) -------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(rank: int, world_size: int, port: int, backend: str, device: str,
          timeout_s: float) -> str:  # fmt: skip
    """On a rank: (re)form the process group, and set up the cells' namespace."""
    import torch
    import torch.distributed as dist
    import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py

    if dist.is_initialized():
        dist.destroy_process_group()
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    # the store waits for every rank for a minute (a rank may be slow to come back); the
    # group's collectives wait timeout_s, so a skipped collective ends in seconds
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=rank == 0,
                          timeout=datetime.timedelta(seconds=60))  # fmt: skip
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))  # fmt: skip
    _NAMESPACE.update(torch=torch, dist=dist, rank=rank, world_size=world_size,
                      device=torch.device(device, rank % max(1, torch.cuda.device_count()))
                      if device == "cuda" else torch.device("cpu"))  # fmt: skip
    return dist.get_backend()


def _run_cell(code: str) -> dict:
    """On a rank: run a cell's code in the rank's namespace, as IPython would (the value of a
    last expression is kept); what it printed, its value's repr, or where it failed."""
    out, err = io.StringIO(), io.StringIO()
    outcome = {"stdout": "", "stderr": "", "value": None, "error": None, "line": None}
    try:
        tree = ast.parse(code, CELL)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compile(tree, CELL, "exec"), _NAMESPACE)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), CELL, "eval"), _NAMESPACE)
                if value is not None:
                    outcome["value"] = repr(value)
    except BaseException as error:  # noqa: BLE001 - a cell's error is shown, the rank lives on
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == CELL]
        outcome["line"] = frames[-1].lineno if frames else None
        first = (str(error).strip().splitlines() or [""])[0]
        outcome["error"] = f"{type(error).__name__}: {first}"[:400]
    outcome["stdout"], outcome["stderr"] = out.getvalue(), err.getvalue()
    return outcome


# ---- the pool, in the kernel --------------------------------------------------------------


@dataclass
class RankOutcome:
    """What one rank did with a cell."""

    rank: int
    stdout: str = ""
    stderr: str = ""
    value: str | None = None  # repr of the cell's last expression
    error: str | None = None  # its exception, one line
    line: int | None = None  # the cell's line it failed at
    finished: bool = True  # False: it was still running when the cell was stopped


class Ranks:
    """A pool of ``n`` live ranks (ipyparallel engines) with a process group formed."""

    def __init__(self, setup: Setup, n: int | None = None, timeout_s: float = 3.0):
        self.n = n or setup.nproc
        if self.n < 1:
            raise ValueError(f"n={self.n!r}: a pool needs 1 rank or more")
        many_gpus = setup.device == "cuda" and setup.n_gpus >= self.n
        self.device, self.backend = ("cuda", "nccl") if many_gpus else ("cpu", "gloo")
        self.timeout_s = timeout_s
        self.cluster = self.client = None

    def start(self) -> Ranks:
        import ipyparallel as ipp

        start = time.monotonic()
        guard = [sys.executable, "-m", "coursekit.guard", "--orphan-exit", sys.executable, "-m"]
        # ERROR: at stop, ipyparallel logs each engine's exit (a SIGTERM traceback) as a warning
        self.cluster = ipp.Cluster(n=self.n, log_level=logging.ERROR, shutdown_atexit=True,
                                   controller_args=["--IPController.use_threads=True"])
        self.cluster.config.LocalControllerLauncher.controller_cmd = [*guard,
                                                                      "ipyparallel.controller"]
        self.cluster.config.LocalEngineSetLauncher.engine_cmd = [*guard, "ipyparallel.engine"]
        self.client = self.cluster.start_and_connect_sync(activate=False)
        _POOLS.append(self)
        self._form_group()
        print(f"{self.n} live rank(s) ({self.backend}) ready in {time.monotonic() - start:.1f} s; "
              f"a collective that waits more than {self.timeout_s:g} s ends with an error")
        return self

    def _form_group(self, again: bool = True) -> None:
        port = _free_port()
        calls = [self.client[engine].apply_async(_join, rank, self.n, port, self.backend,
                                                 self.device, self.timeout_s)
                 for rank, engine in enumerate(self.engines)]  # fmt: skip
        deadline = time.monotonic() + 60 + self.timeout_s
        # the first rank to fail ends the wait: the others may wait for it until their timeout
        while not all(call.ready() for call in calls) and time.monotonic() < deadline:
            if any(call.ready() and not call.successful() for call in calls):
                break
            time.sleep(0.05)
        failed = [str(c.exception()) for c in calls if c.ready() and not c.successful()]
        if again and any(GLOO_CONNECT_FAILED in f for f in failed):  # see runner.py
            print(f"WARNING: a rank could not connect gloo's process group "
                  f"({GLOO_CONNECT_FAILED!r}): a transient of gloo's TCP connect; the ranks "
                  "are started again", flush=True)  # fmt: skip
            self._restart()
            self._form_group(again=False)
            return
        for call in calls:
            call.get(timeout=max(0.1, deadline - time.monotonic()))

    def _revive(self) -> None:
        """Start the ranks anew (their names are lost) and form the group again."""
        print("the live ranks are restarted: a rank was stuck or its process died", flush=True)
        self._restart()
        self._form_group()

    def _restart(self) -> None:
        """Stop every rank's process and start new ones; return once the new ones registered
        (the controller may still list a stopped one for a moment)."""
        old = set(self.client.ids)
        self.cluster.restart_engines_sync()
        deadline = time.monotonic() + 120
        while len(set(self.client.ids) - old) < self.n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {self.n} live ranks did not start again within 120 s")
            time.sleep(0.1)

    @property
    def engines(self) -> list[int]:
        return sorted(self.client.ids)[-self.n :]  # the newest: see _restart

    def run(self, code: str, ranks=None, timeout_s: float | None = None,
            on_interrupt=None) -> list[RankOutcome]:  # fmt: skip
        """Run ``code`` on ``ranks`` (default: all) and return each one's outcome; a rank
        still running after ``timeout_s`` (the group's collective timeout plus 2 s) is
        interrupted, and the process group is formed again after any error. Interrupted
        from the kernel (the stop button), the ranks are interrupted too, ``on_interrupt``
        gets their outcomes, and KeyboardInterrupt goes on, the pool ready for the next cell."""
        if self.client is None:
            raise RuntimeError("the live ranks are not started (or were stopped): start() them")
        ranks = list(range(self.n)) if ranks is None else list(ranks)
        bad = [r for r in ranks if not 0 <= r < self.n]
        if bad:
            raise ValueError(f"ranks {bad}: this pool has ranks 0 to {self.n - 1}")
        wait = self.timeout_s + 2 if timeout_s is None else timeout_s
        if len(self.client.ids) < self.n:  # a rank's process died in an earlier cell
            self._revive()
        calls = {r: self.client[self.engines[r]].apply_async(_run_cell, code) for r in ranks}
        outcomes, deadline, interrupted = {}, time.monotonic() + wait, False
        try:
            for call in calls.values():
                call.wait(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:  # the stop button: the ranks are stopped too, then shown
            interrupted = True
        busy = [r for r, call in calls.items() if not call.ready()]
        if busy:
            self.client.send_signal(signal.SIGINT, targets=[self.engines[r] for r in busy],
                                    block=True)  # fmt: skip
            for r in busy:
                calls[r].wait(2)
        for r, call in calls.items():
            if call.ready() and call.successful():
                outcomes[r] = RankOutcome(r, **call.get())
            elif call.ready():  # interrupted in _run_cell's own frame, or the engine failed
                outcomes[r] = RankOutcome(r, error=str(call.exception()).splitlines()[0][:400])
            else:
                outcomes[r] = RankOutcome(r, finished=False, error="still running: restarted")
        if any(not o.finished for o in outcomes.values()) or len(self.client.ids) < self.n:
            self._revive()  # a rank still running, or a rank's process gone (a native abort)
        elif any(o.error for o in outcomes.values()):
            self._form_group()  # a collective that failed leaves the group unusable
        shown = [outcomes[r] for r in ranks]
        if interrupted:
            if on_interrupt is not None:
                on_interrupt(shown)
            raise KeyboardInterrupt("the live ranks were interrupted too; the pool works on")
        return shown

    def values(self, code: str, ranks=None) -> list:
        """Each rank's value of ``code``'s last expression (a Python literal: numbers, lists,
        dicts), in rank order; a rank's error is raised, naming the rank."""
        outcomes = self.run(code, ranks)
        for o in outcomes:
            if o.error or o.value is None:
                raise RuntimeError(f"rank {o.rank}: {o.error or 'the cell has no value'}"
                                   f"{_where(o, code)}")  # fmt: skip
        return [ast.literal_eval(o.value) for o in outcomes]

    def show(self, outcomes: list[RankOutcome], code: str = "") -> None:
        """Each rank's output side by side (plain text where no front end draws HTML)."""
        from IPython.display import display

        display({"text/plain": _as_text(outcomes, code), "text/html": _as_html(outcomes, code)},
                raw=True)  # fmt: skip

    def stop(self) -> None:
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.client.close()
            self.cluster.stop_cluster_sync()
        self.cluster = self.client = None
        if self in _POOLS:
            _POOLS.remove(self)


def _where(o: RankOutcome, code: str) -> str:
    if o.line is None:
        return ""
    lines = code.splitlines()
    source = lines[o.line - 1].strip() if 0 < o.line <= len(lines) else ""
    return f" at line {o.line}: {source}"


def _as_text(outcomes: list[RankOutcome], code: str) -> str:
    parts = []
    for o in outcomes:
        body = (o.stdout + o.stderr).rstrip("\n")
        if o.value is not None:
            body += ("\n" if body else "") + f"-> {o.value}"
        if o.error:
            body += ("\n" if body else "") + f"!! {o.error}{_where(o, code)}"
        parts.append(f"[rank {o.rank}]\n{body or '(nothing)'}")
    return "\n".join(parts)


def _as_html(outcomes: list[RankOutcome], code: str) -> str:
    e = html.escape
    cells = []
    for o in outcomes:
        body = e((o.stdout + o.stderr).rstrip("\n"))
        if o.value is not None:
            body += f'\n<b>&rarr; {e(o.value)}</b>'
        if o.error:
            body += f'\n<span style="color:#b00">{e(o.error + _where(o, code))}</span>'
        cells.append(f'<td style="vertical-align:top"><pre style="margin:0">{body}</pre></td>')
    head = "".join(f"<th>rank {o.rank}</th>" for o in outcomes)
    return f"<table><tr>{head}</tr><tr>{''.join(cells)}</tr></table>"


def live_ranks(setup: Setup, n: int | None = None, timeout_s: float = 3.0) -> Ranks:
    """Start a pool of ``n`` live ranks (default: the tier's ranks per run) and register the
    ``%%ranks`` cell magic for it."""
    pool = Ranks(setup, n, timeout_s).start()
    try:
        from IPython import get_ipython
    except ImportError:  # outside IPython: ranks.run() only
        return pool
    shell = get_ipython()
    if shell is not None:
        shell.register_magic_function(lambda line, cell: _ranks_magic(pool, line, cell),
                                      "cell", "ranks")  # fmt: skip
    return pool


def _ranks_magic(pool: Ranks, line: str, cell: str) -> None:
    """%%ranks [RANK ...] [--timeout S]: run the cell on those ranks (all by default)."""
    words, timeout_s = shlex.split(line), None
    if "--timeout" in words:
        i = words.index("--timeout")
        timeout_s = float(words[i + 1])
        del words[i : i + 2]
    ranks = [int(w) for w in words] or None
    pool.show(pool.run(cell, ranks, timeout_s, on_interrupt=lambda o: pool.show(o, cell)), cell)


def stop_all() -> None:
    """Stop every pool this kernel started (the kernel's exit does it too)."""
    for pool in list(_POOLS):
        pool.stop()


if os.name == "posix":
    import atexit

    atexit.register(stop_all)
