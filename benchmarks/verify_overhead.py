"""How much the verify command adds to the runs it launches, measured side by side.

    python benchmarks/verify_overhead.py [NOTEBOOK ...]     (default: 00 03)

Runs `python -m coursekit.verify --smoke` over the notebooks, sums the wall time of every
torchrun launch it made (each run folder's run.json), measures a Jupyter kernel's start on
this machine, and reports

    ratio = verify wall time / (sum of launches + one kernel start per notebook)

The course's target is a ratio of at most 1.5: what verify adds beyond the launches and
kernel starts (papermill, the notebooks' own imports and plots) stays under half of that.
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client import KernelManager

ROOT = Path(__file__).resolve().parent.parent


def kernel_start_seconds(tries: int = 3) -> float:
    times = []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(tries):
            start = time.monotonic()
            km = KernelManager(kernel_name="python3", transport="ipc", ip=f"{scratch}/k")
            km.start_kernel()
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            times.append(time.monotonic() - start)
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    return statistics.median(times)


def main() -> int:
    notebooks = sys.argv[1:] or ["00", "03"]
    with tempfile.TemporaryDirectory() as build:
        start = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "coursekit.verify", "--smoke", "--build", build, *notebooks],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        verify_s = time.monotonic() - start
        launches = [json.loads(p.read_text()) for p in Path(build).glob("runs/*/run.json")]
    kernel_s = kernel_start_seconds()
    launch_s = sum(run["seconds"] for run in launches)
    budget_base = launch_s + len(notebooks) * kernel_s
    print(f"verify --smoke {' '.join(notebooks)}: {verify_s:.1f} s wall")
    print(f"  {len(launches)} torchrun launches: {launch_s:.1f} s in all")
    print(f"  kernel start: {kernel_s:.2f} s each, x {len(notebooks)}")
    print(f"ratio = {verify_s:.1f} / ({launch_s:.1f} + {len(notebooks) * kernel_s:.1f}) "
          f"= {verify_s / budget_base:.2f}   (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
