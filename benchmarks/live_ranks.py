"""Live ranks against torchrun: the same collective, from a warm pool and from a launch.

    .venv/bin/python benchmarks/live_ranks.py [--repeats 20] [--launches 3]

For pools of 2 and 4 CPU ranks (gloo): the median seconds of ``--repeats`` cells that
all-reduce a tensor on a warm pool (coursekit.ranks), beside the median of ``--launches``
torchrun launches of a script doing the same (coursekit.run_launcher: interpreter start,
``import torch``, the process group), and the pool's own start. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import coursekit  # noqa: E402
from coursekit.ranks import Ranks  # noqa: E402

CELL = "t = torch.full((1024,), float(rank)); dist.all_reduce(t); t[0].item()"
SCRIPT = '''import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.full((1024,), float(rank)); dist.all_reduce(t)
print("sum", t[0].item(), flush=True)
dist.destroy_process_group()
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--launches", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        setup = coursekit.configure(DEVICE="cpu", RESULTS_DIR=Path(scratch) / "results",
                                    TIMEOUT_S=120, quiet=True)  # fmt: skip
        script = Path(scratch) / "allreduce_once.py"
        script.write_text(SCRIPT)
        print("| ranks | pool start (s) | warm cell, median of "
              f"{args.repeats} (ms) | torchrun launch, median of {args.launches} (s) | ratio |")
        print("|---|---|---|---|---|")
        for n in (2, 4):
            start = time.monotonic()
            pool = Ranks(setup, n=n).start()
            started = time.monotonic() - start
            cells = []
            for _ in range(args.repeats):
                tick = time.monotonic()
                outcomes = pool.run(CELL)
                cells.append(time.monotonic() - tick)
                assert all(o.value == str(float(sum(range(n)))) for o in outcomes), outcomes
            pool.stop()
            launches = [coursekit.run_launcher(script, [], setup=setup, nproc=n,
                                               echo=False).seconds
                        for _ in range(args.launches)]  # fmt: skip
            cell, launch = statistics.median(cells), statistics.median(launches)
            print(f"| {n} | {started:.1f} | {cell * 1e3:.1f} | {launch:.1f} | "
                  f"{launch / cell:.0f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
