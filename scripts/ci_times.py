#!/usr/bin/env python3
"""The figures of one whole `.ci/run`: its stages, where `make test` spent its time, and
how long each notebook took in its full-size `make verify`.

    python scripts/ci_times.py record --setup S --test S --verify S   # .ci/run, at its end

``record`` writes build/ci-times.json from the stage seconds .ci/run measured, the part
table that `make test` left in build/test-times.json (tests/time_table.py) and each
notebook's seconds in build/verify.json. After a fresh-clone run on an idle machine, copy
that file to .ci/last-fresh-clone.json and run scripts/readme.py: docs/internals.md's suite
figures, docs/instructors.md's table of notebook times and class budgets
(coursekit.report.class_minutes of those seconds) and the README's times show those figures,
never typed ones; the tests' class-budget check reads the same file (:func:`verify_seconds`).
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
VERIFY_JSON = Path(os.environ.get("COURSE_VERIFY_JSON", ROOT / "build" / "verify.json"))
RECORD = Path(os.environ.get("COURSE_CI_TIMES", ROOT / "build" / "ci-times.json"))
LAST_FRESH_CLONE = ROOT / ".ci" / "last-fresh-clone.json"
BEGIN, END = "<!-- ci-times: begin (scripts/readme.py) -->", "<!-- ci-times: end -->"
NB_BEGIN = "<!-- verify-times: begin (scripts/readme.py) -->"
NB_END = "<!-- verify-times: end -->"
CI_LIMIT_S = 5400  # CI's 90 minutes for one .ci/run
SLOWEST_KEPT = 30  # of make test's slowest tests, the record keeps these


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def record(setup_s: float, test_s: float, verify_s: float) -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    tests = json.loads(TEST_TIMES.read_text()) if TEST_TIMES.exists() else {"parts": []}
    verified = json.loads(VERIFY_JSON.read_text()) if VERIFY_JSON.exists() else {"notebooks": []}
    figures = {
        "commit": commit, "date": datetime.date.today().isoformat(),
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores",
        "stages": {"setup": setup_s, "make test": test_s, "make verify": verify_s},
        "test_parts": tests["parts"],
        "slowest_tests": tests.get("slowest", [])[:SLOWEST_KEPT],
        "verify": {"tier": verified.get("tier"), "parameters": verified.get("parameters"),
                   "notebooks": [{"notebook": n["notebook"], "status": n["status"],
                                  "seconds": round(n["seconds"], 1),
                                  "claims": n.get("claims_outcomes", {}),
                                  "claims_not_held": n.get("claims_not_held", [])}
                                 for n in verified["notebooks"]]},
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


def verify_seconds(figures: dict | None = None) -> dict[str, float]:
    """Notebook number ("03") -> its seconds in the record's full-size make verify."""
    figures = figures or json.loads(LAST_FRESH_CLONE.read_text())
    return {n["notebook"][:2]: n["seconds"] for n in figures.get("verify", {}).get("notebooks", [])
            if n["status"] == "passed"}  # fmt: skip


def claim_counts(figures: dict) -> dict[str, dict[str, int]]:
    """Notebook number -> its claims by outcome in the record's verify (none in older records)."""
    return {n["notebook"][:2]: n["claims"] for n in figures.get("verify", {}).get("notebooks", [])
            if n.get("claims")}  # fmt: skip


def notebook_table(figures: dict) -> str:
    """Each notebook's full-size verify seconds in the record, and its class budget."""
    sys.path.insert(0, str(ROOT))
    from coursekit.claims import MARKS
    from coursekit.report import class_minutes  # the course's own package, beside scripts/

    seconds = verify_seconds(figures)
    if "verify" in figures:
        head = (f"Full-size `make verify` of the same run (commit `{figures['commit'][:7]}`, "
                f"{figures['cpu']}, the `{figures['verify']['tier']}` tier, the exercises "
                "unsolved):")
    else:  # a record made before records kept them
        head = "The record has no verify seconds per notebook: the budgets count no running time."
    lines = [head, "", "| notebook | verify seconds | class budget | after class | claims "
             f"{' '.join(MARKS.values())} |", "|---|---|---|---|---|"]
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        run = seconds.get(notebook.name[:2])
        budget = class_minutes(notebook, run)
        shown = f"{run:.0f}" if run is not None else "not recorded"
        later = f"{budget['after_class']} min" if budget["after_class"] else "-"
        counts = claim_counts(figures).get(notebook.name[:2])
        said = " ".join(str(counts.get(o, 0)) for o in MARKS) if counts else "not recorded"
        lines.append(f"| {notebook.stem} | {shown} | {budget['minutes']} min | {later} | {said} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record", help="write build/ci-times.json")
    for stage in ("setup", "test", "verify"):
        rec.add_argument(f"--{stage}", type=float, required=True, help=f"seconds of {stage}")
    args = parser.parse_args(argv)
    figures = record(args.setup, args.test, args.verify)
    print("\n" + table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
