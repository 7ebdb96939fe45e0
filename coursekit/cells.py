"""What a learner reads next to a collapsed launcher cell, and how much a cell prints.

A ``%%writefile`` cell longer than a screen is collapsed in JupyterLab (cell metadata
``jupyter.source_hidden``); the cell after it shows what matters about the launcher:

    coursekit.show_diff("../launchers/train_step1_data.py", "../launchers/train_step2_logging.py")
    coursekit.show_outline("../launchers/train_step1_data.py")

Both return a :class:`Listing`: JupyterLab shows it as highlighted Markdown, a plain text
front end (and the executed notebook's ``text/plain``) as the same lines. :func:`diff_lines`
and :func:`outline_lines` compute those lines without a kernel, for the tests and the class
budget. :func:`output_lines` counts the lines one executed cell printed.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

LONG_CELL_LINES = 60  # a %%writefile cell with more lines than this is collapsed
MAX_OUTPUT_LINES = 40  # what one cell may print (and what a diff or outline may show)
CONTEXT_LINES = 1  # unchanged lines shown around each change of a diff
SHOW_CALLS = ("show_diff", "show_outline", "show_functions", "show_lines")
# these show a launcher's own lines; an outline of its names does not
LESSON_CALLS = ("show_diff", "show_functions", "show_lines")
DEFINITIONS = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


class Listing:
    """Lines shown as a fenced Markdown block (``language`` highlights it) or plain text."""

    def __init__(self, lines: list[str], language: str = ""):
        self.lines, self.language = lines, language

    def __str__(self) -> str:
        return "\n".join(self.lines)

    __repr__ = __str__  # text/plain: what a console or the output-size check sees

    def _repr_markdown_(self) -> str:
        return f"```{self.language}\n{self}\n```"


def _shown_name(path: Path | str) -> str:
    """``../launchers/x.py`` as the learner knows it: ``launchers/x.py``."""
    parts = [p for p in Path(path).parts if p not in ("..", ".")]
    return "/".join(parts[-2:]) if len(parts) > 1 else parts[0]


def _moved(old_text: str, new_text: str) -> dict[int, tuple[int, str]]:
    """The top-level definitions of ``old_text`` that ``new_text`` imports instead: first line
    number -> (last line number, blank lines after it included; the line that says so)."""
    imported = {alias.asname or alias.name: node.module
                for node in ast.parse(new_text).body if isinstance(node, ast.ImportFrom)
                for alias in node.names}  # fmt: skip
    lines, spans = old_text.splitlines(), {}
    for node in ast.parse(old_text).body:
        if isinstance(node, DEFINITIONS) and node.name in imported:
            last = node.end_lineno
            while last < len(lines) and not lines[last].strip():
                last += 1
            said = (f"{lines[node.lineno - 1]}  # {node.end_lineno - node.lineno + 1} lines, "
                    f"now imported from {imported[node.name]}")
            spans[node.lineno] = (last, said)
    return spans


def diff_lines(old: Path | str, new: Path | str, context: int = CONTEXT_LINES) -> list[str]:
    """A header naming both files with the counts, then the unified diff's hunks. A definition
    the new file imports instead of defining shows as one removed line that says so."""
    old_text, new_text = Path(old).read_text(), Path(new).read_text()
    a, b = old_text.splitlines(), new_text.splitlines()
    diff = list(difflib.unified_diff(a, b, n=context, lineterm=""))[2:]  # drop the ---/+++ pair
    added = sum(line.startswith("+") for line in diff)
    removed = sum(line.startswith("-") for line in diff)
    header = (f"{_shown_name(old)} -> {_shown_name(new)}: +{added} -{removed} lines "
              f"({len(b)} lines in all)")  # fmt: skip
    moved, shown, line_number, skip_to = _moved(old_text, new_text), [header], 0, 0
    for line in diff:
        if line.startswith("@@"):
            line_number = int(line.split()[1].split(",")[0][1:]) - 1  # "@@ -19,24 ...": 18
        elif not line.startswith("+"):
            line_number += 1  # a line of the old file, removed or kept
            if line.startswith("-") and line_number <= skip_to:
                continue  # inside a moved definition, said already
            if line.startswith("-") and line_number in moved:
                skip_to, said = moved[line_number]
                line = "-" + said
        shown.append(line)
    return shown


def show_diff(old: Path | str, new: Path | str, context: int = CONTEXT_LINES) -> Listing:
    """What changed from launcher ``old`` to launcher ``new`` (a unified diff)."""
    return Listing(diff_lines(old, new, context), "diff")


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0] if doc and doc.strip() else ""


def outline_lines(path: Path | str) -> list[str]:
    """The module docstring's first line, then each top-level function and class with its
    line count and its docstring's first line."""
    source = Path(path).read_text()
    tree = ast.parse(source)
    lines = [f"{_shown_name(path)} ({len(source.splitlines())} lines): "
             f"{_first_line(ast.get_docstring(tree))}".rstrip(": ")]  # fmt: skip
    defs = [n for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]  # fmt: skip
    names = [("class " if isinstance(n, ast.ClassDef) else "def ") + n.name for n in defs]
    width = max(map(len, names), default=0)
    for node, name in zip(defs, names, strict=True):
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        count = node.end_lineno - start + 1
        doc = _first_line(ast.get_docstring(node))
        lines.append(f"  {name.ljust(width)}  {count:4d} lines  {doc}".rstrip())
    return lines


def show_outline(path: Path | str) -> Listing:
    """A short listing of launcher ``path``: what it does and what it is made of."""
    return Listing(outline_lines(path), "text")


def function_lines(path: Path | str, *names: str) -> list[str]:
    """The source of the named top-level functions and classes of ``path`` (``Class.method``
    for a method), in the file's order, each headed by its line numbers."""
    source = Path(path).read_text()
    lines, tree = source.splitlines(), ast.parse(source)
    found = {}
    for node in tree.body:
        if isinstance(node, DEFINITIONS):
            found[node.name] = node
            if isinstance(node, ast.ClassDef):
                methods = [m for m in node.body if isinstance(m, ast.FunctionDef)]
                found.update({f"{node.name}.{m.name}": m for m in methods})
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"{_shown_name(path)} defines no {', '.join(missing)} (it has: "
                         f"{', '.join(found)})")  # fmt: skip
    shown = []
    for node in sorted((found[n] for n in names), key=lambda n: n.lineno):
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        shown.append(f"# {_shown_name(path)}, lines {start}-{node.end_lineno}")
        shown += lines[start - 1 : node.end_lineno]
    return shown


def show_functions(path: Path | str, *names: str) -> Listing:
    """The lines a section teaches from launcher ``path``: the named functions, whole."""
    return Listing(function_lines(path, *names), "python")


def span_lines(path: Path | str, first: str, last: str) -> list[str]:
    """The lines of ``path`` from the first one containing ``first`` to the next one, from
    there on, containing ``last``, headed by their line numbers."""
    lines = Path(path).read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if first in line), None)
    if start is None:
        raise ValueError(f"{_shown_name(path)} has no line containing {first!r}")
    end = next((i for i in range(start, len(lines)) if last in lines[i]), None)
    if end is None:
        raise ValueError(f"{_shown_name(path)} has no line containing {last!r} after line "
                         f"{start + 1}")  # fmt: skip
    return [f"# {_shown_name(path)}, lines {start + 1}-{end + 1}", *lines[start : end + 1]]


def show_lines(path: Path | str, first: str, last: str) -> Listing:
    """The lines a section teaches from launcher ``path`` when they are part of a longer
    function: from the line containing ``first`` to the next containing ``last``."""
    return Listing(span_lines(path, first, last), "python")


def show_call(source: str) -> tuple[str, list[str]] | None:
    """``("show_diff", [old, new])`` when ``source`` is exactly one call
    ``coursekit.show_diff(...)``, ``show_outline(...)``, ``show_functions(...)`` or
    ``show_lines(...)`` with string arguments."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Expr):
        return None
    call = body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "coursekit"
            and call.func.attr in SHOW_CALLS and not call.keywords
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                    for a in call.args)):  # fmt: skip
        return None
    return call.func.attr, [a.value for a in call.args]


def shown_lines(source: str, notebook_dir: Path) -> list[str] | None:
    """The lines a show_diff/show_outline cell prints, computed from the launcher files
    (paths relative to ``notebook_dir``, the kernel's working directory); None when
    ``source`` is not such a call."""
    found = show_call(source)
    if found is None:
        return None
    name, args = found
    paths = [notebook_dir / a for a in args]
    if name == "show_functions":
        return function_lines(paths[0], *args[1:])
    if name == "show_lines":
        return span_lines(paths[0], *args[1:])
    return diff_lines(*paths) if name == "show_diff" else outline_lines(*paths)


def is_long_writefile(cell) -> bool:
    """A ``%%writefile`` code cell whose file has more than LONG_CELL_LINES lines."""
    if cell.cell_type != "code" or not cell.source.startswith("%%writefile "):
        return False
    return len(cell.source.splitlines()) - 1 > LONG_CELL_LINES


def is_collapsed(cell) -> bool:
    return bool(cell.metadata.get("jupyter", {}).get("source_hidden"))


def collapsed_summary(cell) -> str:
    """What a collapsed cell is, for a ``<summary>``: ``launchers/x.py (N lines)`` for a
    ``%%writefile`` cell (N: the file's lines), else its first line and its length."""
    lines = cell.source.splitlines()
    first = lines[0] if lines else ""
    if first.startswith("%%writefile"):
        target = first.split(maxsplit=1)[1].split()[-1] if " " in first.strip() else "?"
        return f"{_shown_name(target)} ({len(lines) - 1} lines)"
    return f"{first[:80]} ({len(lines)} lines)"


def _text_lines(text: str | list[str]) -> int:
    text = "".join(text) if isinstance(text, list) else text
    return len(text.rstrip("\n").split("\n")) if text.strip() else 0


UNCOUNTED_MIMES = ("image/", "application/vnd.jupyter.widget-view+json")


def output_lines(cell) -> int:
    """Lines of text one executed code cell shows: its streams (stdout, stderr, each taken
    as one text, so a line written in pieces counts once) and the ``text/plain`` of its
    results and displays (``text/markdown`` where a display has it: that is what is shown,
    less its code fences' lines, so a show_diff counts as the lines computed statically).
    Pictures and widgets do not count; nor do errors (a failing cell fails anyway)."""
    if cell.cell_type != "code":
        return 0
    streams: dict[str, str] = {}
    count = 0
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            text = out.text if isinstance(out.text, str) else "".join(out.text)
            streams[out.name] = streams.get(out.name, "") + text
        elif out.output_type in ("execute_result", "display_data"):
            data = out.get("data", {})
            if any(m.startswith(UNCOUNTED_MIMES) for m in data):
                continue
            if "text/markdown" in data:  # a code fence's ``` lines are not shown as lines
                text = data["text/markdown"]
                text = "".join(text) if isinstance(text, list) else text
                shown = [line for line in text.split("\n") if not line.startswith("```")]
                count += _text_lines("\n".join(shown))
            else:
                count += _text_lines(data.get("text/plain", ""))
    return count + sum(_text_lines(t) for t in streams.values())


def committed_cells(executed_nb) -> list[tuple[int, object]]:
    """(index in the committed notebook, cell) for each cell of a papermill-executed copy:
    the cells papermill added (injected parameters, error banner) are left out."""
    added = {"injected-parameters", "papermill-error-cell-tag"}
    cells = [c for c in executed_nb.cells if not added & set(c.metadata.get("tags", []))]
    return list(enumerate(cells))


def longest_output(executed_nb) -> tuple[int, int | None]:
    """(lines, committed index) of the cell that printed the most lines."""
    best = (0, None)
    for i, cell in committed_cells(executed_nb):
        n = output_lines(cell)
        if n > best[0]:
            best = (n, i)
    return best
