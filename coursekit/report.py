"""The instructor's report: one self-contained HTML file written by the verify command.

One row per notebook of the course (status, seconds, the time a class should budget, the
most lines one cell printed), then per notebook: the failing cell with its source
(collapsible where JupyterLab collapses it) and error, the key figures from its results file,
and every plot its executed copy holds (embedded as data URIs: the file needs nothing else,
so it can be mailed or opened offline). On top: the tier and the hardware it ran on.

The class budget is an estimate, not a measurement; :func:`class_minutes` says how.
"""

from __future__ import annotations

import datetime as dt
import html
import importlib.metadata
import math
import os
import platform
import re
from pathlib import Path

import nbformat
import psutil

from .cells import MAX_OUTPUT_LINES, collapsed_summary, is_collapsed, shown_lines
from .claims import HELD, NO_DIFFERENCE, NOT_HELD, OUTCOMES, SKIPPED, Claim, outcome_of

READING_WPM = 100  # words per minute for explanations a learner is meant to understand
CODE_LINES_PER_MIN = 12  # a learner reads a code cell before running it
# a code task (tasks.check), as learners take it: write, run the check, read NOT YET, fix, again
FUNCTION_TASK_MIN = 15  # a function to complete in a notebook cell
LAUNCHER_TASK_MIN = 20  # a launcher to complete (a %%writefile cell run under torchrun): 15-30
PREDICT_MIN = 3  # per prediction (tasks.predict): think, type a number, read the answer
ROUND_TO_MIN = 5


def class_minutes(notebook: Path, run_seconds: float | None) -> dict:
    """The time a class should budget for ``notebook``, and the parts it is made of.

    reading (markdown words at READING_WPM) + code (lines at CODE_LINES_PER_MIN) +
    running (the seconds this verify run measured) + per code task (``tasks.check``)
    LAUNCHER_TASK_MIN where the learner completes a launcher (the check reads a file:
    ``coursekit.answer_file``), else FUNCTION_TASK_MIN, + PREDICT_MIN per prediction
    (``tasks.predict``), rounded up to ROUND_TO_MIN. Explaining and questions come on top:
    that is the instructor's to add. A ``coursekit.show_*`` cell counts as the lines it
    shows, computed from the launcher files, and a collapsed cell (``jupyter.source_hidden``)
    right before it as nothing more: that is what the learner reads.

    A section whose heading starts with AFTER_CLASS ("## After class") is the learner's to do
    after the class: its cells are budgeted apart, under ``after_class`` (minutes, rounded the
    same way), and the running seconds stay with the class.
    """
    nb = nbformat.read(notebook, as_version=4)
    after = _after_class(nb.cells)
    in_class = _minutes(nb.cells, [not a for a in after], notebook.parent, run_seconds)
    later = _minutes(nb.cells, after, notebook.parent, None)
    return {**in_class, "after_class": later["minutes"] if any(after) else 0,
            "n_after_class_exercises": later["n_exercises"]}


AFTER_CLASS = "## After class"


def _after_class(cells: list) -> list[bool]:
    """Per cell: whether it lies in an after-class section (from a markdown heading starting
    with AFTER_CLASS to the next level-2 heading that does not)."""
    flags, inside = [], False
    for cell in cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            inside = cell.source.startswith(AFTER_CLASS)
        flags.append(inside)
    return flags


def _minutes(cells: list, chosen: list[bool], notebook_dir: Path,
             run_seconds: float | None) -> dict:  # fmt: skip
    """:func:`class_minutes`'s parts over the ``chosen`` cells."""
    picked = [c for c, keep in zip(cells, chosen, strict=True) if keep]
    words = sum(len(c.source.split()) for c in picked if c.cell_type == "markdown")
    lines = sum(_lines_read(cells, i, notebook_dir) for i in range(len(cells)) if chosen[i])
    kinds = _task_kinds(picked)
    launcher_tasks, exercises = kinds.count("launcher"), len(kinds)
    predictions = sum(c.source.count("tasks.predict(") for c in picked if c.cell_type == "code")
    parts = {
        "reading": words / READING_WPM,
        "code": lines / CODE_LINES_PER_MIN,
        "running": (run_seconds or 0) / 60,
        "exercises": launcher_tasks * LAUNCHER_TASK_MIN
        + (exercises - launcher_tasks) * FUNCTION_TASK_MIN + predictions * PREDICT_MIN,
    }
    total = ROUND_TO_MIN * math.ceil(sum(parts.values()) / ROUND_TO_MIN)
    return {"minutes": total, **{k: round(v, 1) for k, v in parts.items()},
            "words": words, "code_lines": lines, "n_exercises": exercises,
            "n_launcher_tasks": launcher_tasks, "n_predictions": predictions}  # fmt: skip


def _task_kinds(cells: list) -> list[str]:
    """Per ``tasks.check`` call, in order: "launcher" where the learner's answer is a file
    (the check cell reads it with ``coursekit.answer_file``), else "function"."""
    kinds = []
    for cell in cells:
        if cell.cell_type == "code":
            kind = "launcher" if "answer_file(" in cell.source else "function"
            kinds += [kind] * cell.source.count("tasks.check(")
    return kinds


def _lines_read(cells: list, i: int, notebook_dir: Path) -> int:
    """Non-blank code lines a learner reads in ``cells[i]``: for a ``coursekit.show_*`` cell,
    the lines it shows; nothing for a collapsed cell right before one (what it shows is what
    is read) and for a task's check (a cell tagged ``task-check``: the learner reads its
    verdict, inside the task's minutes, not its code)."""
    cell = cells[i]
    if cell.cell_type != "code" or "task-check" in cell.metadata.get("tags", []):
        return 0
    shown = _show_cell_lines(cell, notebook_dir)
    if shown is not None:
        return sum(1 for line in shown if line.strip())
    following = cells[i + 1] if i + 1 < len(cells) else None
    if is_collapsed(cell) and following is not None and _show_cell_lines(following, notebook_dir):
        return 0
    return sum(1 for line in cell.source.splitlines() if line.strip())


def _show_cell_lines(cell, notebook_dir: Path) -> list[str] | None:
    """The lines a show_* code cell prints; None for any other cell (or a launcher file
    missing or broken: then the cells count as they are)."""
    if cell.cell_type != "code":
        return None
    try:
        return shown_lines(cell.source, notebook_dir)
    except (OSError, SyntaxError):
        return None


def hardware() -> dict:
    """What this machine is: CPU model and cores, memory, GPUs as PyTorch sees them."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from .config import visible_gpus

    gpus = visible_gpus()
    if gpus:
        import torch

        gpus = [f"{name}, {torch.cuda.get_device_properties(i).total_memory / 2**30:.0f} GiB"
                for i, name in enumerate(gpus)]  # fmt: skip
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": f"{os.cpu_count()} logical, {psutil.cpu_count(logical=False)} physical",
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "gpus": "; ".join(gpus) if gpus else "none visible to PyTorch",
        "python": platform.python_version(),
        "torch": importlib.metadata.version("torch"),
    }


def _plots(executed: Path) -> list[str]:
    """Every picture the executed notebook shows, as data URIs."""
    if not executed.exists():
        return []
    uris = []
    for cell in nbformat.read(executed, as_version=4).cells:
        for out in cell.get("outputs", []):
            for mime in ("image/png", "image/jpeg"):
                if mime in out.get("data", {}):
                    data = re.sub(r"\s", "", out["data"][mime])
                    uris.append(f"data:{mime};base64,{data}")
    return uris


def _cell_source(notebook: Path, index: int | None) -> tuple[str, str | None]:
    """(source, summary) of a committed cell; summary is None unless it is collapsed."""
    if index is None:
        return "", None
    cells = nbformat.read(notebook, as_version=4).cells
    if not 0 <= index < len(cells):
        return "", None
    cell = cells[index]
    return cell.source, collapsed_summary(cell) if is_collapsed(cell) else None


def _shown(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _claims_list(claims: list[dict]) -> str:
    """Claims as the results file has them: each outcome with the sentence true here."""
    e = html.escape
    items = []
    for c in claims:
        made = Claim.from_record(c)
        figures = ", ".join(f"{k} = {_shown(v)}" for k, v in c["figures"].items())
        css = made.outcome.replace(" ", "-")
        expected = f"<br>the lesson expected: {e(made.expected())}" if made.outcome != HELD else ""
        items.append(f'<li class="{css}">{e(made.outcome)}: {e(made.sentence())}' + expected
                     + (f' <span class="note">({e(figures)})</span>' if figures else "")
                     + "</li>")  # fmt: skip
    return '<ul class="claims">' + "".join(items) + "</ul>"


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:left;vertical-align:top}th{background:#f3f3f3}.passed{color:#116611;font-weight:bold}
.failed,.timed-out{color:#aa1111;font-weight:bold}.not-run{color:#777}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto}img{max-width:100%;border:1px solid #ddd}
section{border-top:2px solid #ddd;margin-top:2em}.note{color:#555;font-size:.9em}
.held{color:#116611}.not-held{color:#8a4b00}.no-difference{color:#555555}.skipped{color:#777777}.too-long{color:#aa1111;font-weight:bold}
summary{cursor:pointer;color:#444}
"""


def write_report(path: Path, reports: list, notebooks: list[Path], executed_dir: Path,
                 tier: str, parameters: dict) -> dict:  # fmt: skip
    """Write the report for ``reports`` (verify's NotebookReport rows); every notebook in
    ``notebooks`` gets a row, those this run did not execute marked "not run". Returns the
    class budget of every notebook (see :func:`class_minutes`)."""
    e = html.escape
    by_stem = {r.notebook: r for r in reports}
    hw = hardware()
    rows, sections, budgets = [], [], {}
    for nb in notebooks:
        r = by_stem.get(nb.stem)
        status = r.status if r else "not run"
        budget = class_minutes(nb, r.seconds if r else None)
        budgets[nb.stem] = budget
        css = status.replace(" ", "-")
        seconds = f"{r.seconds:.1f}" if r else "-"
        if r and r.status != "passed":
            detail = (f"cell {r.failed_cell}: " if r.failed_cell is not None else "") + r.error
        elif r:
            detail = ", ".join(f"{k}={_shown(v)}" for k, v in list(r.figures.items())[:4])
        else:
            detail = "not selected in this verify run"
        longest = "-"
        if r:
            n, cell = r.longest_output_lines, r.longest_output_cell
            where = f" (cell {cell})" if cell is not None else ""
            longest = (f'<span class="too-long">{n}{where}</span>' if n > MAX_OUTPUT_LINES
                       else f"{n}{where}")  # fmt: skip
        rows.append(
            f'<tr id="row-{e(nb.stem)}" class="notebook-row"><td>{e(nb.stem)}</td>'
            f'<td class="{css}">{e(status)}</td><td>{seconds}</td>'
            f"<td>{budget['minutes']}{'' if r else ' (no run time)'}</td>"
            f'<td class="longest-output">{longest}</td><td>{e(detail)}</td></tr>'
        )
        if r is None:
            continue
        body = [f'<section id="nb-{e(nb.stem)}"><h2>{e(nb.stem)}: '
                f'<span class="{css}">{e(status)}</span> in {r.seconds:.1f} s</h2>']  # fmt: skip
        if r.status != "passed":
            source, summary = _cell_source(nb, r.failed_cell)
            shown = f"<pre>{e(source)}</pre>"
            if summary:  # collapsed in JupyterLab: collapsible here too
                shown = (f'<details class="course-collapsed"><summary>{e(summary)}</summary>'
                         f"{shown}</details>")  # fmt: skip
            body.append(f"<h3>Failing cell {r.failed_cell}</h3>{shown}"
                        f'<p class="error">{e(r.error)}</p>')  # fmt: skip
        if r.claims:
            counts = ", ".join(f"{len(r.claims_with(o))} {o}" for o in OUTCOMES)
            body.append(f"<h3>Claims ({counts})</h3>" + _claims_list(r.claims))
        if r.tasks:
            body.append("<h3>The learner's tasks</h3><table class=\"tasks\">" + "".join(
                f"<tr><td>{e(t['name'])}</td><td>{e(t['kind'])}</td><td>{e(t['outcome'])}</td>"
                "</tr>" for t in r.tasks) + "</table>")  # fmt: skip
        if r.figures:
            body.append("<h3>Key figures</h3><table>" + "".join(
                f"<tr><td>{e(k)}</td><td>{e(_shown(v))}</td></tr>" for k, v in r.figures.items()
            ) + "</table>")  # fmt: skip
        plots = _plots(executed_dir / nb.name)
        if plots:
            body.append(f"<h3>Plots ({len(plots)})</h3>"
                        + "".join(f'<p><img alt="plot {i} of {e(nb.stem)}" src="{uri}"></p>'
                                  for i, uri in enumerate(plots, 1)))  # fmt: skip
        b = budget
        body.append(f'<p class="note">Class budget {b["minutes"]} min = reading {b["reading"]} '
                    f'+ code {b["code"]} + running {b["running"]} + exercises {b["exercises"]} '
                    "(minutes, rounded up).</p></section>")  # fmt: skip
        sections.append("".join(body))
    differs = [(r.notebook, Claim.from_record(c)) for r in reports for c in r.claims
               if outcome_of(c) in (NOT_HELD, NO_DIFFERENCE)]  # fmt: skip
    skipped = [(r.notebook, Claim.from_record(c)) for r in reports for c in r.claims_with(SKIPPED)]
    differs_html = (
        "<p>Every claim the notebooks made held on this machine.</p>" if not differs else
        "<p>Where the lessons' story differs on this hardware: say so in class.</p>"
        '<table id="claims-not-held"><tr><th>notebook</th><th>outcome</th><th>claimed</th>'
        "<th>true here</th></tr>"
        + "".join(f"<tr><td>{e(nb)}</td><td>{e(c.outcome)}</td><td>{e(c.text)}</td>"
                  f"<td>{e(c.sentence())}</td></tr>" for nb, c in differs)
        + "</table>")  # fmt: skip
    if skipped:
        differs_html += (
            "<p>Claims not run on this machine (not false: not tried):</p>"
            '<table id="claims-skipped"><tr><th>notebook</th><th>claim</th><th>why</th></tr>'
            + "".join(f"<tr><td>{e(nb)}</td><td>{e(c.text)}</td><td>{e(c.why_skipped)}</td></tr>"
                      for nb, c in skipped)
            + "</table>")  # fmt: skip
    total = sum(b["minutes"] for b in budgets.values())
    smoke = parameters.get("SMOKE")
    params = ", ".join(f"{k}={v!r}" for k, v in parameters.items() if k != "RESULTS_DIR")
    hw_rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in hw.items())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Course verify report</title>
<style>{STYLE}</style></head><body>
<h1>Course verify report</h1>
<p>{e(dt.datetime.now().strftime("%Y-%m-%d %H:%M"))}; parameters: {e(params)}</p>
<h2>Tier and hardware</h2>
<table id="hardware"><tr><th>tier</th><td>{e(tier)}</td></tr>{hw_rows}</table>
<h2>Notebooks</h2>
<table id="notebooks"><tr><th>notebook</th><th>status</th><th>seconds</th>
<th>class budget (min)</th><th>longest output (lines)</th>
<th>failing cell / error, or key figures</th></tr>
{"".join(rows)}</table>
<h2>Claims that did not hold here</h2>
{differs_html}
<p class="note">Class budget: about {total} minutes for the whole course. Per notebook:
markdown words at {READING_WPM} words per minute, code lines at {CODE_LINES_PER_MIN} per
minute, the seconds this run measured, per code task {LAUNCHER_TASK_MIN} minutes where it
completes a launcher and {FUNCTION_TASK_MIN} where it completes a function, {PREDICT_MIN} per
prediction, rounded up to
{ROUND_TO_MIN} minutes; your own explanations and questions come on top.
{"This run used SMOKE sizes: at full sizes the running part takes longer." if smoke else ""}</p>
{"".join(sections)}
</body></html>
"""
    path.write_text(page)
    return budgets
