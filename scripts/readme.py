#!/usr/bin/env python3
"""The course's generated text, in every Markdown file that holds its markers (never typed):

- blocks between ``<!-- NAME: begin (scripts/readme.py) -->`` and ``<!-- NAME: end -->``:
  ``course-map`` (README.md), from the course's table (coursekit/course.py);
  ``lesson-constants`` (CONTRIBUTING.md), each notebook's constants and the cell binding them
  (coursekit/lesson_constants.py); ``ci-times``
  (docs/internals.md), the last fresh-clone .ci/run's stages and where `make test` spent its
  time; ``verify-times`` (docs/instructors.md), each notebook's full-size verify seconds and
  its class budget;
- figures inside a sentence, ``<!-- generated: NAME -->...<!-- /generated -->``:
  ``verify-time`` and ``test-time`` (the record's "make verify" and "make test" stages) and
  ``course-length`` (the sum of the notebooks' class budgets, coursekit.report.class_minutes
  of the record's verify seconds); ``tasks`` (the notebooks' tasks, counted by the same
  function).

Every figure comes from .ci/last-fresh-clone.json (scripts/ci_times.py). The files scanned:
README.md, CONTRIBUTING.md, docker/README.md and docs/*.md (not docs/claims.md, which
`make claims` writes). The check also fails when a block has left its file or a relative
link in those files leads nowhere.

    python scripts/readme.py            # rewrite them
    python scripts/readme.py --check    # exit 1 if a file is not what they give
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
import ci_times  # noqa: E402  beside this script

from coursekit.course import course_map  # noqa: E402
from coursekit.lesson_constants import constants_table  # noqa: E402
from coursekit.report import class_minutes  # noqa: E402

README = ROOT / "README.md"
MAP = ("<!-- course-map: begin (scripts/readme.py) -->", "<!-- course-map: end -->")
CONSTANTS = ("<!-- lesson-constants: begin (scripts/readme.py) -->",
             "<!-- lesson-constants: end -->")
NOT_SCANNED = {ROOT / "docs" / "claims.md"}  # written by make claims, not by this script

# a block: its markers, what goes between them, and the file that must hold it
BLOCKS: dict[str, tuple[tuple[str, str], Callable[[dict], str], str]] = {
    "course-map": (MAP, lambda figures: course_map(), "README.md"),
    "lesson-constants": (CONSTANTS, lambda figures: constants_table(), "CONTRIBUTING.md"),
    "ci-times": ((ci_times.BEGIN, ci_times.END), ci_times.table, "docs/internals.md"),
    "verify-times": ((ci_times.NB_BEGIN, ci_times.NB_END), ci_times.notebook_table,
                     "docs/instructors.md"),
}  # fmt: skip
INLINE = re.compile(r"<!-- generated: ([a-z-]+) -->(.*?)<!-- /generated -->", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def files() -> list[Path]:
    """The Markdown files that may hold generated text."""
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "docker" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]  # fmt: skip
    return [p for p in found if p.exists() and p not in NOT_SCANNED]


def _minutes(seconds: float) -> str:
    return f"about {round(seconds / 60)} minutes"


def _run(figures: dict) -> str:
    return f"the last fresh-clone `.ci/run`, commit `{figures['commit'][:7]}` on {figures['cpu']}"


def stage_time(stage: str) -> Callable[[dict], str]:
    def shown(figures: dict) -> str:
        seconds = figures["stages"][stage]
        return f"{_minutes(seconds)} ({seconds:.0f} s in {_run(figures)})"

    return shown


def course_length(figures: dict) -> str:
    """The sum of the notebooks' class budgets, with the record's verify seconds."""
    seconds = ci_times.verify_seconds(figures)
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    budgets = [class_minutes(nb, seconds.get(nb.name[:2])) for nb in notebooks]
    total, later = sum(b["minutes"] for b in budgets), sum(b["after_class"] for b in budgets)
    hours, minutes = divmod(total, 60)
    counted = ("they count reading, code, running and exercises" if seconds else
               "they count reading, code and exercises, not running: the last record kept no "
               "verify seconds per notebook")  # fmt: skip
    return (f"about {hours} h {minutes:02d} min of class time ({total} min: the "
            f"{len(notebooks)} notebooks' class budgets added up; {counted}), and "
            f"{later} min after class (the sections headed \"After class\")")


def task_counts(figures: dict) -> str:
    """How many tasks the notebooks give, of each kind (coursekit.report.class_minutes's count)."""
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    counts = [class_minutes(nb, None) for nb in notebooks]
    fewest = min(c["n_exercises"] + c["n_predictions"] for c in counts)
    writing = sum(c["n_exercises"] > 0 for c in counts)
    return (f"each of the {len(counts)} notebooks gives you at least {fewest} tasks "
            f"({sum(c['n_predictions'] for c in counts)} predictions, "
            f"{sum(c['n_exercises'] + c['n_after_class_exercises'] for c in counts)} pieces of "
            f"code to write in {writing} notebooks)")


FIGURES: dict[str, Callable[[dict], str]] = {
    "verify-time": stage_time("make verify"),
    "test-time": stage_time("make test"),
    "course-length": course_length,
    "tasks": task_counts,
}


def fill_block(text: str, markers: tuple[str, str], body: str, where: str) -> str:
    """Every block between ``markers`` in ``text`` holds ``body``."""
    begin, end = markers
    parts = text.split(begin)
    out = [parts[0]]
    for part in parts[1:]:
        _, sep, tail = part.partition(end)
        if not sep:
            raise SystemExit(f"{where}: {begin!r} has no {end!r} after it")
        out.append(f"{begin}\n{body}\n{end}{tail}")
    return "".join(out)


def rendered(text: str, figures: dict, where: str = "README.md") -> str:
    """``text`` with every block and inline figure it holds filled in from ``figures``."""
    for markers, body, _ in BLOCKS.values():
        if markers[0] in text:
            text = fill_block(text, markers, body(figures), where)

    def figure(match: re.Match) -> str:
        name = match.group(1)
        if name not in FIGURES:
            raise SystemExit(f"{where}: no generated figure {name!r} (known: {', '.join(FIGURES)})")
        return f"<!-- generated: {name} -->{FIGURES[name](figures)}<!-- /generated -->"

    return INLINE.sub(figure, text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def broken_links(path: Path, text: str) -> list[str]:
    """Relative links in ``text`` whose file, or whose heading in a Markdown file, is missing."""
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.M)
            if anchor not in {_slug(h) for h in headings}:
                broken.append(target)
    return broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if it differs")
    parser.add_argument("--record", type=Path, default=ci_times.LAST_FRESH_CLONE,
                        help="the .ci/run record to show (default: the last fresh clone's)")
    args = parser.parse_args(argv)
    figures = json.loads(args.record.read_text())
    problems = []
    for name, (markers, _, home) in BLOCKS.items():
        home_path = ROOT / home
        if not home_path.exists() or markers[0] not in home_path.read_text():
            problems.append(f"{home} lacks the generated block {name!r} ({markers[0]})")
    for path in files():
        where = str(path.relative_to(ROOT))
        text = path.read_text()
        # at the start of a line a comment opens an HTML block: the figure would leave its sentence
        problems += [f"{where}: a generated figure starts a line; keep it inside its sentence"
                     for _ in re.finditer(r"^[ \t]*<!-- generated:", text, re.M)]
        wanted = rendered(text, figures, where)
        if wanted != text:
            if args.check:
                problems.append(f"{where}: its generated text is out of date: run "
                                "`python scripts/readme.py`")  # fmt: skip
            else:
                path.write_text(wanted)
        problems += [f"{where}: the link {link!r} leads nowhere"
                     for link in broken_links(path, wanted)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
