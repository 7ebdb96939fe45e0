#!/usr/bin/env python3
"""The figures of one whole `.ci/run`: its stages and where `make test` spent its time.

    python scripts/ci_times.py record --setup S --test S --verify S   # .ci/run, at its end
    python scripts/ci_times.py readme [FILE]      # README's table from FILE (a record)
    python scripts/ci_times.py readme --check     # exit 1 if README's table is not FILE's

``record`` writes build/ci-times.json from the stage seconds .ci/run measured and the part
table that `make test` left in build/test-times.json (tests/time_table.py). After a
fresh-clone run on an idle machine, copy that file to .ci/last-fresh-clone.json and run
``readme``: the README's contributor section shows those figures, never typed ones.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_TIMES = Path(os.environ.get("COURSE_TEST_TIMES", ROOT / "build" / "test-times.json"))
RECORD = Path(os.environ.get("COURSE_CI_TIMES", ROOT / "build" / "ci-times.json"))
LAST_FRESH_CLONE = ROOT / ".ci" / "last-fresh-clone.json"
README = ROOT / "README.md"
BEGIN, END = "<!-- ci-times: begin (scripts/ci_times.py readme) -->", "<!-- ci-times: end -->"
CI_LIMIT_S = 5400  # CI's 90 minutes for one .ci/run


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def record(setup_s: float, test_s: float, verify_s: float) -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    parts = json.loads(TEST_TIMES.read_text())["parts"] if TEST_TIMES.exists() else []
    figures = {
        "commit": commit, "date": datetime.date.today().isoformat(),
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores",
        "stages": {"setup": setup_s, "make test": test_s, "make verify": verify_s},
        "test_parts": parts,
    }  # fmt: skip
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def table(figures: dict) -> str:
    stages = figures["stages"]
    total = sum(stages.values())
    lines = [
        f"Last fresh-clone `.ci/run` (commit `{figures['commit'][:7]}`, {figures['date']}, "
        f"{figures['cpu']}): {total:.0f} s in all, {total / CI_LIMIT_S:.0%} of CI's 90 minutes.",
        *([f"{figures['note']}"] if figures.get("note") else []),
        "",
        "| stage | seconds |",
        "|---|---|",
        *(f"| {name} | {seconds:.0f} |" for name, seconds in stages.items()),
        "",
        "| part of `make test` | tests | seconds |",
        "|---|---|---|",
        *(f"| {p['part']} | {p['tests']} | {p['seconds']:.0f} |" for p in figures["test_parts"]),
    ]
    return "\n".join(lines)


def readme_with(figures: dict, text: str) -> str:
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"README.md lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{table(figures)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record", help="write build/ci-times.json")
    for stage in ("setup", "test", "verify"):
        rec.add_argument(f"--{stage}", type=float, required=True, help=f"seconds of {stage}")
    show = sub.add_parser("readme", help="README's table from a record")
    show.add_argument("file", nargs="?", type=Path, default=LAST_FRESH_CLONE)
    show.add_argument("--check", action="store_true", help="only check; exit 1 if it differs")
    args = parser.parse_args(argv)
    if args.action == "record":
        figures = record(args.setup, args.test, args.verify)
        print("\n" + table(figures))
        return 0
    figures = json.loads(args.file.read_text())
    text = README.read_text()
    wanted = readme_with(figures, text)
    if args.check:
        if wanted != text:
            print(f"README.md's ci-times table is not {args.file}'s: run "
                  "`python scripts/ci_times.py readme`", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    README.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
