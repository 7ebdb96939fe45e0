"""Where the suite's time went: a table at the end of every `make test`, by part of the course.

Each test's setup, call and teardown seconds count for the part its module belongs to (a
module-scoped fixture, such as the browser's JupyterLab or the container image, counts for
the first test that needs it). The table is also written to build/test-times.json, with the
slowest tests one by one (where the next cut should look), and scripts/ci_times.py folds it
into the figures of a whole `.ci/run`.
"""

from __future__ import annotations

import collections
import json
import os
import re
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# COURSE_TEST_TIMES: elsewhere (tests/test_time_table.py runs a suite of its own)
TIMES_FILE = Path(os.environ.get("COURSE_TEST_TIMES", ROOT / "build" / "test-times.json"))
# (part, what decides it: a test module's file name), first match wins
PARTS = [
    ("browser", re.compile(r"^test_browser\.py$")),
    ("container", re.compile(r"^test_(container|docker)\.py$")),
    ("notebooks", re.compile(r"^test_(\d\d_\w+|notebooks)\.py$")),
    ("live ranks", re.compile(r"^test_ranks\.py$")),
    ("launchers", re.compile(r"^test_launchers\.py$")),
    ("slurm", re.compile(r"^test_slurm\.py$")),
]
REST = "the rest"
SLOWEST = 80  # the tests kept in the file by their seconds, the next change's shopping list


def part_of(nodeid: str) -> str:
    module = Path(nodeid.split("::", 1)[0]).name
    return next((part for part, pattern in PARTS if pattern.match(module)), REST)


class TimeTable:
    def __init__(self) -> None:
        self.seconds: collections.Counter = collections.Counter()
        self.tests: dict[str, set] = collections.defaultdict(set)
        self.per_test: collections.Counter = collections.Counter()  # nodeid -> seconds
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report) -> None:
        part = part_of(report.nodeid)
        self.seconds[part] += report.duration
        self.tests[part].add(report.nodeid)
        self.per_test[report.nodeid] += report.duration

    def rows(self) -> list[dict]:
        order = [p for p, _ in PARTS] + [REST]
        return [{"part": p, "tests": len(self.tests[p]), "seconds": round(self.seconds[p], 1)}
                for p in order if p in self.tests]  # fmt: skip

    def pytest_terminal_summary(self, terminalreporter) -> None:
        rows = self.rows()
        if not rows:
            return
        wall = time.monotonic() - self.started
        counted = sum(r["seconds"] for r in rows)
        terminalreporter.write_sep("-", "where the time went (tests/time_table.py)")
        terminalreporter.write_line(f"{'part':<12}{'tests':>7}{'seconds':>10}{'share':>8}")
        for r in rows:
            share = r["seconds"] / counted if counted else 0.0
            terminalreporter.write_line(
                f"{r['part']:<12}{r['tests']:>7}{r['seconds']:>10.1f}{share:>8.0%}")
        terminalreporter.write_line(f"{'all':<12}{sum(r['tests'] for r in rows):>7}"
                                    f"{counted:>10.1f}   (wall {wall:.0f} s)")  # fmt: skip
        TIMES_FILE.parent.mkdir(parents=True, exist_ok=True)
        slowest = [{"test": t, "part": part_of(t), "seconds": round(s, 1)}
                   for t, s in self.per_test.most_common(SLOWEST)]  # fmt: skip
        TIMES_FILE.write_text(json.dumps({"wall_seconds": round(wall, 1), "parts": rows,
                                          "slowest": slowest}, indent=1) + "\n")  # fmt: skip


def register(config) -> None:
    """Called by conftest's pytest_configure."""
    config.pluginmanager.register(TimeTable(), "course-time-table")
