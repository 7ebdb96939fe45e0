#!/usr/bin/env python3
"""The README's generated tables, from the files that hold their figures (never typed):

- the course map, from the course's table (coursekit/course.py);
- the last fresh-clone .ci/run's stages and parts, and each notebook's full-size verify
  seconds with its class budget, from .ci/last-fresh-clone.json (scripts/ci_times.py).

    python scripts/readme.py            # rewrite them in README.md
    python scripts/readme.py --check    # exit 1 if README.md is not what they give
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
import ci_times  # noqa: E402  beside this script

from coursekit.course import course_map  # noqa: E402

README = ROOT / "README.md"
MAP = ("<!-- course-map: begin (scripts/readme.py) -->", "<!-- course-map: end -->")


def between(text: str, markers: tuple[str, str], body: str) -> str:
    begin, end = markers
    head, sep, rest = text.partition(begin)
    _, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        raise SystemExit(f"README.md lacks the markers {begin!r} ... {end!r}")
    return f"{head}{begin}\n{body}\n{end}{tail}"


def rendered(text: str, record: Path = ci_times.LAST_FRESH_CLONE) -> str:
    figures = json.loads(record.read_text())
    text = between(text, MAP, course_map())
    text = between(text, (ci_times.BEGIN, ci_times.END), ci_times.table(figures))
    return between(text, (ci_times.NB_BEGIN, ci_times.NB_END), ci_times.notebook_table(figures))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if it differs")
    parser.add_argument("--record", type=Path, default=ci_times.LAST_FRESH_CLONE,
                        help="the .ci/run record to show (default: the last fresh clone's)")
    args = parser.parse_args(argv)
    text = README.read_text()
    wanted = rendered(text, args.record)
    if args.check:
        if wanted != text:
            print("README.md's generated tables are out of date: run `python scripts/readme.py`",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    README.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
