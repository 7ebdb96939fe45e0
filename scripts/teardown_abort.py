#!/usr/bin/env python3
"""How often a plain gloo script that trains the course's DDP wrappers aborts at exit, per torch.

    python scripts/teardown_abort.py --runs 30                     # this Python's torch
    python scripts/teardown_abort.py --runs 30 --python .matrix/torch-2.11.0/bin/python ...
    python scripts/teardown_abort.py --runs 30 --workaround        # the launchers' two lines

Each run is ``torchrun --standalone --nproc-per-node 2`` of this file as a worker: what a
learner writes after notebook 07, with none of the course's teardown lines. Two ranks on gloo
(CPU) train a small MLP wrapped in each reference solution (solutions/ddp_naive.py,
ddp_bucketed.py, ddp_overlapped.py) next to torch's DDP on a copy, check the wrappers' weights
against DDP's, then ``destroy_process_group()`` and return. No ``import torch.distributed.nn``
before ``init_process_group`` and no ``del`` of the DDP object before the destroy: DDP imports
that module lazily, and its functions keep the default group alive as default arguments
(torch/distributed/nn/functional.py, ``group=group.WORLD``).

A run is counted as: ``passed`` (exit 0), ``abort`` (its checks passed, then a rank died with
"terminate called without an active exception"), ``hang`` (no exit within --run-timeout s,
killed), or ``failed`` (anything else: the checks did not pass, or another error). The loop is
bounded: --runs runs, and none starts after --max-seconds. One JSON line per torch at the end
(and --json FILE), with the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ABORT = "terminate called without an active exception"
CHECKS_PASSED = "teardown-abort: checks passed"


def worker(workaround: bool) -> None:
    """One rank: the wrappers against DDP, then the teardown (with or without the two lines)."""
    if workaround:
        import torch.distributed.nn  # noqa: F401 - the course's first line, before init
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, str(ROOT / "solutions"))
    from ddp_bucketed import BucketedDDP
    from ddp_naive import NaiveDDP
    from ddp_overlapped import OverlappedDDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    worst = 0.0
    for wrap in (NaiveDDP, lambda m: BucketedDDP(m, bucket_mb=0.001), OverlappedDDP):
        mine = wrap(_copy(base))
        reference = DDP(_copy(base))
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (mine, reference)]
        for step in range(3):
            g = torch.Generator().manual_seed(100 * step + rank)
            x, y = torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)
            for model, opt in zip((mine, reference), opts, strict=True):
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                if model is mine:
                    mine.finish_gradient_synchronization()
                opt.step()
        for a, b in zip(mine.module.parameters(), reference.module.parameters(), strict=True):
            worst = max(worst, (a - b).abs().max().item())
        if workaround:
            del reference  # the course's second line: DDP's destructor still has its group
    if worst > 1e-5:
        raise SystemExit(f"rank {rank}: a wrapper differs from DDP by {worst:.2g}")
    if rank == 0:
        print(f"{CHECKS_PASSED} (largest difference from DDP {worst:.1g})", flush=True)
    dist.destroy_process_group()


def _copy(module):
    import copy

    return copy.deepcopy(module)


def one_run(python: str, workaround: bool, timeout: float, folder: Path) -> tuple[str, str]:
    cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--log-dir", str(folder), str(Path(__file__).resolve()), "--worker",
           *(["--workaround"] if workaround else [])]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=folder, start_new_session=True)  # fmt: skip
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) \
            else (err.stdout or "")  # fmt: skip
        _kill_group(err)
        return "hang", out[-400:]
    text = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return "passed", ""
    if ABORT in text and CHECKS_PASSED in text:
        return "abort", ""
    return "failed", text.strip()[-400:]


def _kill_group(err: subprocess.TimeoutExpired) -> None:
    """subprocess.run killed torchrun; its workers (sessions of their own) are found by name."""
    import psutil

    me = str(Path(__file__).resolve())
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmdline = p.info["cmdline"] or []
        if me in cmdline and "--worker" in cmdline:
            try:
                if p.info["ppid"] == 1 or not psutil.pid_exists(p.info["ppid"]):
                    p.kill()
            except psutil.Error:
                pass


def loop(python: str, runs: int, max_seconds: float, workaround: bool, run_timeout: float) -> dict:
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
    counts = {"passed": 0, "abort": 0, "hang": 0, "failed": 0}
    examples: list[str] = []
    start = time.monotonic()
    done = 0
    with tempfile.TemporaryDirectory(prefix="teardown-abort-") as tmp:
        for i in range(runs):
            if time.monotonic() - start > max_seconds:
                break
            folder = Path(tmp) / f"run{i}"
            folder.mkdir()
            outcome, detail = one_run(python, workaround, run_timeout, folder)
            counts[outcome] += 1
            done += 1
            if detail and len(examples) < 2:
                examples.append(detail)
            print(f"  torch {version} run {i + 1}: {outcome}", flush=True)
    return {"torch": version, "python": python, "workaround": workaround, "runs": done,
            **counts, "seconds": round(time.monotonic() - start, 1),
            "examples": examples}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", nargs="*", default=[sys.executable],
                        help="the Pythons to run it with (one torch each)")
    parser.add_argument("--runs", type=int, default=30, help="runs per torch (at most)")
    parser.add_argument("--max-seconds", type=float, default=600, help="per torch: no run "
                        "starts after this")  # fmt: skip
    parser.add_argument("--run-timeout", type=float, default=90, help="a hang: killed after")
    parser.add_argument("--workaround", action="store_true", help="with the course's two lines")
    parser.add_argument("--json", type=Path, help="append the counts here (one line per torch)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.workaround)
        return 0
    results = []
    for python in args.python:
        result = loop(python, args.runs, args.max_seconds, args.workaround, args.run_timeout)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "examples"}), flush=True)
        for example in result["examples"]:
            print("    e.g. " + example.replace("\n", "\n    "))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(result) + "\n")
    print(f"\n{'torch':<14} runs  passed  abort  hang  failed  (workaround: "
          f"{'yes' if args.workaround else 'no'})")
    for r in results:
        print(f"{r['torch']:<14} {r['runs']:>4}  {r['passed']:>6}  {r['abort']:>5}  "
              f"{r['hang']:>4}  {r['failed']:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
