"""The learner's progress through the course: every task, solved, not yet or not tried.

    make progress        # coursekit.progress.main(): the course's tasks from build/results

Read from the results files the notebooks wrote (build/results by default): a notebook not
run yet shows as such. The last cell of every notebook shows the same table, and the verify
report the instructor's (with ``make verify SOLUTIONS=1``, every task solved).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .course import COURSE
from .exercises import NOT_TRIED, NOT_YET, SOLVED, TASK_OUTCOMES

ROOT = Path(__file__).resolve().parent.parent
MARK = {SOLVED: "✔", NOT_YET: "✘", NOT_TRIED: "·"}


def course_tasks(results_dir: Path) -> list[tuple[str, list[dict] | None]]:
    """(notebook stem, its tasks as its results file has them, or None if it has not run)."""
    rows = []
    for nb in COURSE:
        path = Path(results_dir) / f"{nb.stem}.json"
        rows.append((nb.stem, json.loads(path.read_text()).get("tasks", []) if path.exists()
                     else None))  # fmt: skip
    return rows


def progress_table(results_dir: Path, only: str | None = None) -> str:
    """A markdown table: per notebook, each task and its outcome."""
    lines = ["| notebook | task | kind | outcome |", "|---|---|---|---|"]
    counts = dict.fromkeys(TASK_OUTCOMES, 0)
    for stem, tasks in course_tasks(results_dir):
        if only and stem != only:
            continue
        if not tasks:
            lines.append(f"| {stem} | ({'not run yet' if tasks is None else 'no tasks'}) | | |")
            continue
        for task in tasks:
            counts[task["outcome"]] += 1
            lines.append(f"| {stem} | {task['name']} | {task['kind']} | "
                         f"{MARK[task['outcome']]} {task['outcome']} |")  # fmt: skip
    total = sum(counts.values())
    head = f"{counts[SOLVED]} of {total} tasks solved" + "".join(
        f", {n} {o}" for o, n in counts.items() if o != SOLVED and n)
    return head + "\n\n" + "\n".join(lines)


def show(setup, stem: str | None = None) -> None:
    """In a notebook: this notebook's tasks (``stem``) or the whole course's, as a table."""
    from IPython.display import Markdown, display

    display(Markdown(progress_table(setup.results_dir, stem)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", nargs="?", type=Path, default=ROOT / "build" / "results")
    args = parser.parse_args(argv)
    print(progress_table(args.results_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
