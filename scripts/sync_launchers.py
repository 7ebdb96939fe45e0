"""Every launcher from its notebook's %%writefile cell, in one step (the cell is the source).

    python scripts/sync_launchers.py            # write each launcher its cell differs from
    python scripts/sync_launchers.py --check    # write nothing: print the differing lines, exit 1

A lesson's DDP code lives in its %%writefile cell, where the learner reads and edits it; the
file under launchers/ is what torchrun runs and what the tests launch. Edit the cell, then run
this (or Run All in the notebook, which writes the file the same way). `make sync` runs it;
tests/test_launchers.py runs the check.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def writefile_cells(notebooks: Path) -> dict[Path, tuple[str, str]]:
    """launcher path -> (notebook name, the text %%writefile writes), for every such cell."""
    cells: dict[Path, tuple[str, str]] = {}
    for notebook in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type == "code" and cell.source.startswith("%%writefile"):
                first, body = cell.source.split("\n", 1)
                target = (notebook.parent / first.split()[1]).resolve()
                if target in cells:
                    raise SystemExit(f"{target.name} is written by two cells: "
                                     f"{cells[target][0]} and {notebook.name}")  # fmt: skip
                cells[target] = (notebook.name, body + "\n")  # Jupyter keeps no final newline
    return cells


def differences(cells: dict[Path, tuple[str, str]]) -> dict[Path, list[str]]:
    """launcher -> the unified diff from the file to its cell, for each that differs."""
    found = {}
    for path, (notebook, text) in cells.items():
        old = path.read_text() if path.exists() else ""
        if old != text:
            name = str(path.relative_to(ROOT))
            found[path] = list(difflib.unified_diff(
                old.splitlines(), text.splitlines(), f"{name} (the file)",
                f"{name} (its cell in {notebook})", lineterm=""))  # fmt: skip
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; print each differing launcher's lines, exit 1")
    args = parser.parse_args(argv)
    cells = writefile_cells(ROOT / "notebooks")
    found = differences(cells)
    for path, diff in found.items():
        if args.check:
            print("\n".join(diff))
        else:
            path.write_text(cells[path][1])
            print(f"wrote {path.relative_to(ROOT)} from {cells[path][0]}")
    if args.check and found:
        print(f"\n{len(found)} launcher(s) differ from their cells: "
              "python scripts/sync_launchers.py writes them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
