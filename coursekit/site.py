"""The course as a static website: every notebook as a page, with the outputs of a verified run.

    python -m coursekit.site [--build build] [--out build/site]     (or: make site)

Pages come from the executed copies that the verify command leaves in ``build/executed/``,
rendered by nbconvert's JupyterLab template; a notebook with no executed copy is rendered as
committed, without outputs, and its page says so. ``index.html`` lists the course in order
with each notebook's verify status, seconds and class budget (from ``build/verify.json``),
and links the instructor's report when there is one. Plots are embedded in the pages and
the mathematics is typeset by a copy of MathJax inside the site (``mathjax/``, from the
jupyter-server-mathjax package): the folder can be copied anywhere and read offline; no page
loads a script from the web. A launcher cell collapsed in JupyterLab (``jupyter.source_hidden``)
is a collapsible ``<details>`` on its page, its summary naming the file and its length.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
from pathlib import Path

import jinja2
import nbformat
from nbconvert import HTMLExporter
from nbconvert.preprocessors import TagRemovePreprocessor

from .cells import collapsed_summary, is_collapsed
from .report import class_minutes

ROOT = Path(__file__).resolve().parent.parent


MATHJAX_DIR = "mathjax"  # inside the site
MATHJAX_URL = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"

# nbconvert's JupyterLab page, less what would come from the web: require.js (only widget
# views need it, and those need their JavaScript from a CDN too: a widget cell shows its
# static picture instead), mermaid (no notebook draws diagrams with it); collapsed cells
# become <details>.
PAGE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{% block input_group -%}
{%- if cell.metadata.get("course_collapsed") -%}
<details class="course-collapsed"><summary>{{ cell.metadata.course_collapsed | e }}</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock input_group %}
"""


def mathjax_source() -> Path | None:
    """The folder of MathJax 2 that jupyter-server-mathjax ships, or None if not installed."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        return None
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    return static if (static / "MathJax.js").exists() else None


def copy_mathjax(out: Path) -> bool:
    """Copy MathJax into ``out/mathjax`` (English only); False when it is not installed."""
    source = mathjax_source()
    if source is None:
        return False

    def other_languages(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n != "en"] if Path(folder).name == "localization" else []

    shutil.copytree(source, out / MATHJAX_DIR, ignore=other_languages)
    return True


def title_of(nb: nbformat.NotebookNode, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (m := re.search(r"^#\s+(.+)$", cell.source, re.M)):
            return m.group(1).strip()
    return fallback


def _banner(text: str) -> str:
    return (f'<div class="course-banner" style="padding:.6em 1em;margin:0 0 1em;'
            f'background:#fff4d6;border:1px solid #e0c36a">{text}</div>')  # fmt: skip


def render(notebook: Path, executed: Path | None, verified: dict | None) -> tuple[str, str]:
    """(title, html page) of one notebook."""
    nb = nbformat.read(executed or notebook, as_version=4)
    for cell in nb.cells:
        if is_collapsed(cell):
            cell.metadata["course_collapsed"] = collapsed_summary(cell)
    # the parameters papermill injected are the verify run's business, not the reader's
    remove = TagRemovePreprocessor(remove_cell_tags={"injected-parameters"}, enabled=True)
    exporter = HTMLExporter(
        template_name="lab", embed_images=True, mathjax_url=MATHJAX_URL,
        extra_loaders=[jinja2.DictLoader({"course_page.html.j2": PAGE_TEMPLATE})],
        template_file="course_page.html.j2",
    )  # fmt: skip
    exporter.register_preprocessor(remove, enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    title = title_of(nb, notebook.stem)
    if executed is None:
        note = ("This page shows the notebook as committed, without outputs: it was not "
                "executed in the verified run this site was built from.")  # fmt: skip
    else:
        status = verified.get("status", "unknown") if verified else "unknown"
        seconds = f" in {verified['seconds']:.0f} s" if verified else ""
        note = f"Outputs from a verified run: {html.escape(status)}{seconds}."
    nav = '<p><a href="index.html">&larr; the course</a></p>'
    body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav + _banner(note), body, count=1)
    return title, body


def build_site(build: Path, out: Path, notebooks_dir: Path = ROOT / "notebooks") -> list[Path]:
    """Write ``out/<notebook>.html`` for every notebook and ``out/index.html``; return pages."""
    notebooks = sorted(notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        raise SystemExit(f"no NN_*.ipynb notebooks in {notebooks_dir}")
    verify_json = build / "verify.json"
    verified = {}
    if verify_json.exists():
        verified = {r["notebook"]: r for r in json.loads(verify_json.read_text())["notebooks"]}
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if not copy_mathjax(out):
        print("note: jupyter-server-mathjax is not installed: the pages show their "
              "mathematics as TeX source (pip install -r requirements-dev.txt)", file=sys.stderr)
    pages, rows = [], []
    for nb in notebooks:
        executed = build / "executed" / nb.name
        record = verified.get(nb.stem)
        title, page = render(nb, executed if executed.exists() and record else None, record)
        path = out / f"{nb.stem}.html"
        path.write_text(page)
        pages.append(path)
        status = record["status"] if record else "not verified"
        seconds = f"{record['seconds']:.0f}" if record else "-"
        minutes = class_minutes(nb, record["seconds"] if record else None)["minutes"]
        rows.append(f'<tr><td><a href="{path.name}">{html.escape(title)}</a></td>'
                    f"<td>{html.escape(status)}</td><td>{seconds}</td><td>{minutes}</td></tr>")
    report = ""
    if (build / "report.html").exists():
        shutil.copy(build / "report.html", out / "report.html")
        report = '<p>The instructor\'s <a href="report.html">verify report</a>.</p>'
    (out / "index.html").write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Multi-GPU training in PyTorch</title>
<style>body{{font-family:system-ui,sans-serif;max-width:900px;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3em .7em;text-align:left}}
</style></head><body>
<h1>Multi-GPU training in PyTorch, measured step by step</h1>
<p>The course's notebooks with the outputs of a verified run, to read without running them.
To run them yourself, see the course's README (<code>make lab</code>).</p>
<table id="course"><tr><th>notebook</th><th>verified</th><th>seconds</th>
<th>class budget (min)</th></tr>
{"".join(rows)}</table>
{report}
</body></html>
""")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build",
                        help="where verify left executed/ and verify.json")  # fmt: skip
    parser.add_argument("--out", type=Path, help="the site's folder (default: BUILD/site)")
    parser.add_argument("--notebooks-dir", type=Path, default=ROOT / "notebooks")
    args = parser.parse_args(argv)
    out = args.out or args.build / "site"
    if not (args.build / "verify.json").exists():
        print(f"note: {args.build / 'verify.json'} is missing: pages without outputs "
              "(run `make verify` first for a site with outputs)", file=sys.stderr)
    pages = build_site(args.build, out, args.notebooks_dir)
    print(f"{len(pages)} notebook page(s) and index.html in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
