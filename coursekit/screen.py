"""What a learner sees on screen, per notebook: ``make screen``.

A visible cell should read like a lesson (at most 30 lines: its code, the run, the picture,
the task), with the machinery out of sight: the calls of the claims, tasks and results
bookkeeping at most 8 % of the visible code lines. A launcher's lesson lines are on screen
when its ``%%writefile`` cell is open (at most 60 lines), or when the cell right after it
prints them (``coursekit.show_diff`` or ``coursekit.show_functions``; an outline of names
alone does not count). Counted from the committed notebooks, without a kernel.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .cells import LESSON_CALLS, is_collapsed, show_call
from .course import ROOT

MAX_VISIBLE_CELL_LINES = 30
MAX_OPEN_LAUNCHER_LINES = 60
MAX_BOOKKEEPING_SHARE = 0.08
BOOKKEEPING = re.compile(r"(claims|tasks)\.|coursekit\.(answer|Claims|Tasks)|.*save_results")
# the one-line calls into the notebook's lesson module that took the wording's place (its
# claim_* functions, save, close): counted apart, so the report shows what is left of both
MODULE_CALLS = re.compile(r"lesson\.(claim_\w+|save|close|batchnorm)$")


def bookkeeping_lines(source: str, calls: re.Pattern = BOOKKEEPING) -> int:
    """Lines of ``source`` taken by calls of the claims, tasks and results bookkeeping (or by
    the calls ``calls`` matches)."""
    lines = "\n".join("#" + line if line.lstrip().startswith(("%", "!")) else line
                      for line in source.splitlines())  # fmt: skip
    try:
        tree = ast.parse(lines)
    except SyntaxError:
        return 0
    taken: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and calls.match(ast.unparse(node.func)):
            taken.update(range(node.lineno, node.end_lineno + 1))
    return len(taken)


@dataclass
class Screen:
    notebook: str
    visible_lines: int = 0
    bookkeeping: int = 0
    module_calls: int = 0  # lines of calls into the lesson module (claims, record, closing)
    long_cells: list[tuple[int, int]] = field(default_factory=list)  # (cell, lines)
    hidden_launchers: list[tuple[int, str]] = field(default_factory=list)  # (cell, file)

    @property
    def share(self) -> float:
        return self.bookkeeping / self.visible_lines if self.visible_lines else 0.0


def written_file(cell) -> str | None:
    first = cell.source.splitlines()[0] if cell.source else ""
    if cell.cell_type != "code" or not first.startswith("%%writefile"):
        return None
    return first.split()[-1]


def lesson_on_screen(cells, i: int, written: str) -> bool:
    """Whether launcher cell ``i``'s lesson lines are on screen: open and short enough, or the
    next cell prints its diff from its predecessor or the functions the section is about."""
    cell = cells[i]
    if not is_collapsed(cell) and len(cell.source.splitlines()) - 1 <= MAX_OPEN_LAUNCHER_LINES:
        return True
    after = cells[i + 1] if i + 1 < len(cells) else None
    call = show_call(after.source) if after is not None and after.cell_type == "code" else None
    if call is None or call[0] not in LESSON_CALLS:
        return False
    name, args = call
    return (args[-1] if name == "show_diff" else args[0]) == written


def screen(path: Path) -> Screen:
    cells = nbformat.read(path, as_version=4).cells
    seen = Screen(path.stem)
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        written = written_file(cell)
        if written:
            if not lesson_on_screen(cells, i, written):
                seen.hidden_launchers.append((i, written))
            continue
        if is_collapsed(cell):
            continue
        n = len(cell.source.splitlines())
        seen.visible_lines += n
        seen.bookkeeping += bookkeeping_lines(cell.source)
        seen.module_calls += bookkeeping_lines(cell.source, MODULE_CALLS)
        if n > MAX_VISIBLE_CELL_LINES:
            seen.long_cells.append((i, n))
    return seen


def report(screens: list[Screen]) -> str:
    rows = ["notebook                                        visible  bookkeeping  +module  "
            "cells>30  launchers off screen"]  # fmt: skip

    def row(name, visible, bookkeeping, module, long, hidden):
        both = (bookkeeping + module) / visible if visible else 0.0
        share = bookkeeping / visible if visible else 0.0
        return (f"{name[:46]:46}  {visible:7d}  {share:10.0%}  {both:7.0%}  {long:8d}  "
                f"{hidden:4d}")  # fmt: skip

    for s in screens:
        rows.append(row(s.notebook, s.visible_lines, s.bookkeeping, s.module_calls,
                        len(s.long_cells), len(s.hidden_launchers)))  # fmt: skip
    rows.append(row("all", *(sum(getattr(s, k) for s in screens) for k in (
        "visible_lines", "bookkeeping", "module_calls")), sum(len(s.long_cells) for s in screens),
        sum(len(s.hidden_launchers) for s in screens)))  # fmt: skip
    rows.append(f"goals: bookkeeping at most {MAX_BOOKKEEPING_SHARE:.0%} of the visible code "
                f"lines, no visible cell over {MAX_VISIBLE_CELL_LINES} lines, every launcher's "
                "lesson lines on screen (+module: with the one-line calls into the lesson "
                "module that replaced the wording)")  # fmt: skip
    for s in screens:
        for i, n in s.long_cells:
            rows.append(f"  {s.notebook} cell {i}: {n} lines visible")
        for i, written in s.hidden_launchers:
            rows.append(f"  {s.notebook} cell {i}: {written} collapsed, its lesson lines not "
                        "printed below it (show_diff or show_functions)")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    stems = argv if argv is not None else sys.argv[1:]
    paths = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                   if not stems or any(p.stem.startswith(s) for s in stems))  # fmt: skip
    print(report([screen(p) for p in paths]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
