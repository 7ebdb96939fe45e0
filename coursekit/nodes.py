"""Run several torchrun agents at once, one per pretend "node", with the runner's guarantees.

Each agent is an ordinary :func:`coursekit.run_launcher` call (live lines, ``TIMEOUT_S``,
its whole process tree killed at the end) in a thread of its own. What this adds:

- the agents share one ``--out`` folder (the shared filesystem of a real cluster);
- a node can be told to start only once some line has appeared (``start_when``), to
  show a node joining a job that is already running;
- when one agent fails or runs out of time, the others are stopped too, so nothing is
  left waiting for a partner that will never come;
- the agents' own lines are marked ``[nodeN]``; the ranks' lines keep ``[rankR]``;
- on a GPU tier each pretend node gets GPUs of its own (``CUDA_VISIBLE_DEVICES``): NCCL
  refuses two ranks on one GPU ("Duplicate GPU detected"), and on one host every node's
  local rank 0 would otherwise take cuda:0. Where there are fewer GPUs than ranks, the
  nodes run CPU ranks with gloo instead, and the job's ``note`` says so.

The rendezvous arguments (the multi-node wiring) stay with the caller, in plain sight.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .config import Setup
from .echo import Echo, check_echo
from .result import LauncherFailed, LauncherTimeout, RunResult, _label, read_metrics
from .runner import fresh_run_dir, run_launcher


@dataclass
class JobResult:
    """A multi-node job: one RunResult per node agent, sharing ``out_dir``."""

    name: str
    run_dir: Path
    nodes: list[RunResult | None] = field(default_factory=list)
    errors: list[BaseException | None] = field(default_factory=list)
    lines: list[tuple[int, int | None, str]] = field(default_factory=list)  # (node, rank, text)
    seconds: float = 0.0
    device: str = "cpu"  # what the ranks ran on
    note: str = ""  # why the job runs on another device than the tier's, if it does

    @property
    def out_dir(self) -> Path:
        return self.run_dir / "out"

    @property
    def ok(self) -> bool:
        return all(n is not None and n.ok for n in self.nodes)

    @property
    def metrics(self) -> dict:
        return read_metrics(self.name, self.out_dir)

    def rank_lines(self, rank: int) -> list[str]:
        return [text for _, r, text in self.lines if r == rank]

    def node_lines(self, node: int) -> list[str]:
        """What node ``node``'s agent printed itself (not its ranks)."""
        return [text for n, r, text in self.lines if n == node and r is None]

    @property
    def output(self) -> str:
        return self.log()

    def log(self, rank: int | None = None) -> str:
        """Every line of the job (agents' lines marked ``[nodeN]``, ranks' ``[rankR]``), or
        only rank ``rank``'s lines."""
        if rank is not None:
            return "\n".join(self.rank_lines(rank))
        return "\n".join(f"[node{n}] {text}" if r is None else _label(r, text)
                         for n, r, text in self.lines)

    def failure(self) -> str:
        """Why the job failed, in a few lines (the first failed node's ``failure()``)."""
        failed = [i for i, n in enumerate(self.nodes) if n is None or not n.ok]
        if not failed:
            return ""
        first = self.nodes[failed[0]]
        if first is None:
            return f"{self.name}: node{failed[0]} never started (its trigger line never came)"
        return f"{self.name} failed on node(s) {failed}; node{failed[0]}: " + first.failure()

    def closing_line(self) -> str:
        ranks = sum(n.nproc for n in self.nodes if n is not None)
        state = "" if self.ok else " FAILED,"
        return (f"{self.name}: {len(self.nodes)} nodes, {ranks} ranks, {self.seconds:.1f} s,"
                f"{state} {len(self.lines)} lines in {self.run_dir} (job.log() prints them)")


def node_devices(setup: Setup, n_nodes: int, nproc: int) -> tuple[str, list[dict], str]:
    """The device of a job of ``n_nodes`` pretend nodes on this host, each node's environment,
    and a note when the job cannot run on the tier's device."""
    if setup.device != "cuda":
        return "cpu", [{} for _ in range(n_nodes)], ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(i) for i in range(setup.n_gpus)]
    gpus = gpus[: setup.n_gpus]
    if len(gpus) < n_nodes * nproc:
        return "cpu", [{} for _ in range(n_nodes)], (
            f"{n_nodes} pretend nodes x {nproc} rank(s) need {n_nodes * nproc} GPUs, one per "
            f"rank and none shared between nodes (NCCL refuses two ranks on one GPU); this "
            f"machine has {len(gpus)}: the nodes run CPU ranks with gloo")
    return "cuda", [{"CUDA_VISIBLE_DEVICES": ",".join(gpus[i * nproc : (i + 1) * nproc])}
                    for i in range(n_nodes)], ""  # fmt: skip


def run_nodes(
    script: str | os.PathLike,
    args: Sequence[object] = (),
    *,
    setup: Setup,
    rendezvous: Sequence[Sequence[str]],
    nproc: int | None = None,
    name: str | None = None,
    start_when: Sequence[str | None] | None = None,
    torchrun_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    check: bool = True,
    echo: str | bool = "brief",
    on_line: Callable[[int, int | None, str], None] | None = None,
) -> JobResult:
    """Start one torchrun agent per entry of ``rendezvous`` (its rendezvous arguments).

    ``start_when[i]``: node i starts once a line containing that text has been printed by
    any node (None: at once). ``check=False`` returns a failed job instead of raising.
    ``echo`` as in :func:`run_launcher` ("brief": rank 0's lines, a sample of its step lines,
    when each agent starts, one closing line; "all": every line; False: nothing).
    """
    check_echo(echo)
    name = name or Path(script).stem
    n_nodes = len(rendezvous)
    start_when = list(start_when or [None] * n_nodes)
    if len(start_when) != n_nodes:
        raise ValueError(f"start_when has {len(start_when)} entries for {n_nodes} nodes")
    run_dir = fresh_run_dir(setup, name)
    args = [str(a) for a in args]
    if "--out" not in args:
        args += ["--out", str(run_dir / "out")]
    device, node_env, note = node_devices(setup, n_nodes, setup.nproc if nproc is None else nproc)
    if "--device" not in args:
        args += ["--device", device]
    if note and echo:
        print(f"note: {note}", flush=True)
    job = JobResult(name=name, run_dir=run_dir, nodes=[None] * n_nodes,
                    errors=[None] * n_nodes, device=device, note=note)
    stop = threading.Event()
    printed = threading.Lock()
    shower = Echo(echo, name, None)
    seen: list[str] = []
    started = [threading.Event() for _ in range(n_nodes)]

    def line(node: int, rank: int | None, text: str) -> None:
        with printed:
            job.lines.append((node, rank, text))
            seen.append(text)
            if echo == "all" and rank is None:
                print(f"[node{node}] {text}", flush=True)
            else:
                shower.line(rank, text)
        if on_line:
            on_line(node, rank, text)
        for i, trigger in enumerate(start_when):
            if trigger and not started[i].is_set() and trigger in text:
                started[i].set()

    def agent(node: int) -> None:
        if start_when[node]:
            while not started[node].wait(0.1):
                if stop.is_set():
                    return
        if echo:
            with printed:
                print(f"[node{node}] starting its agent", flush=True)
        try:
            job.nodes[node] = run_launcher(
                script, args, setup=setup, nproc=nproc, timeout_s=timeout_s,
                name=f"{name}/node{node}", rendezvous=rendezvous[node],
                torchrun_args=torchrun_args, env={**node_env[node], **(env or {})},
                check=False, echo=False,
                on_line=lambda rank, text: line(node, rank, text), stop=stop,
            )  # fmt: skip
            if not job.nodes[node].ok:
                stop.set()  # a node failed: its partners would wait for it forever
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            job.errors[node] = e
            if isinstance(e, LauncherFailed):
                job.nodes[node] = e.result
            stop.set()

    for i in range(n_nodes):  # the nodes without a trigger start at once
        if not start_when[i]:
            started[i].set()
    start = time.monotonic()
    threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(n_nodes)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    finally:  # an interrupt (the stop button) stops every node and waits for them
        stop.set()
        for t in threads:
            t.join()
        job.seconds = time.monotonic() - start
        (run_dir / "output.log").write_text(job.log() + "\n")
        shower.close(None)
        if echo:
            print(job.closing_line(), flush=True)

    timeouts = [e for e in job.errors if isinstance(e, LauncherTimeout)]
    if timeouts:
        raise LauncherTimeout(f"{name}: " + timeouts[0].result.failure(), timeouts[0].result)
    other = [e for e in job.errors if e is not None and not isinstance(e, LauncherFailed)]
    if other:
        raise other[0]
    if check and not job.ok:
        failed = [i for i, n in enumerate(job.nodes) if n is None or not n.ok]
        raise LauncherFailed(job.failure(), job.nodes[failed[0]])
    return job
