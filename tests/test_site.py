"""The course website: every notebook gets a page, with the outputs of the verified run."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import nbformat
import pytest
from browser_kit import artifacts_dir, launch_browser, sync_playwright
from conftest import NOTEBOOKS, ROOT

from coursekit.site import build_site

# a 1x1 PNG: stands for a plot of the verified run
PIXEL = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)).decode()  # fmt: skip


def fake_verified_build(build):
    """A build/ as verify leaves it, with notebook 00 executed (outputs marked) and no other."""
    (build / "executed").mkdir(parents=True)
    nb00 = nbformat.read(NOTEBOOKS[0], as_version=4)
    code = next(c for c in nb00.cells if c.cell_type == "code" and "parameters" not in
                c.metadata.get("tags", []))  # fmt: skip
    code.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="output of the verified run 4c1e\n"),
        nbformat.v4.new_output("display_data", data={"image/png": PIXEL}),
    ]
    nbformat.write(nb00, build / "executed" / NOTEBOOKS[0].name)
    (build / "verify.json").write_text(json.dumps({"tier": "cpu", "parameters": {}, "notebooks": [
        {"notebook": NOTEBOOKS[0].stem, "status": "passed", "seconds": 12.3}]}))  # fmt: skip


def test_site_has_a_page_for_every_notebook_with_the_verified_outputs(tmp_path):
    build = tmp_path / "build"
    fake_verified_build(build)
    proc = subprocess.run([sys.executable, "-m", "coursekit.site", "--build", str(build)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = build / "site"
    index = (site / "index.html").read_text()
    linked = re.findall(r'<a href="([^"]+\.html)">', index)
    assert linked == [f"{nb.stem}.html" for nb in NOTEBOOKS]  # every notebook, in course order
    for nb in NOTEBOOKS:
        page = (site / f"{nb.stem}.html").read_text()
        title = next(c.source for c in nbformat.read(nb, as_version=4).cells
                     if c.cell_type == "markdown").splitlines()[0].lstrip("# ").strip()
        assert title.split("·")[-1].strip() in page, f"{nb.stem}: its title is not on its page"
        assert 'href="index.html"' in page
    first = (site / f"{NOTEBOOKS[0].stem}.html").read_text()
    assert "output of the verified run 4c1e" in first
    assert f"data:image/png;base64,{PIXEL}" in first
    assert "Outputs from a verified run: passed in 12 s" in first
    assert "injected-parameters" not in first
    for nb in NOTEBOOKS[1:]:  # no executed copy: rendered as committed, and it says so
        assert "was not executed in the verified run" in (site / f"{nb.stem}.html").read_text()


def test_make_site_is_one_target():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^site:", makefile, re.M)
    assert "coursekit.site" in makefile


def planted_course(tmp_path):
    """A one-notebook course with mathematics and a collapsed launcher cell, built as a site."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    launcher = "\n".join(f"x{i} = {i}" for i in range(50))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 00 · Planted\n\nThe ring moves $2(N-1)/N$ of the data:"
                                      "\n\n$$t = \\frac{S}{B}$$"),
        nbformat.v4.new_code_cell("%%writefile ../launchers/planted.py\n" + launcher,
                                  metadata={"jupyter": {"source_hidden": True}}),
        nbformat.v4.new_code_cell('coursekit.show_outline("../launchers/planted.py")'),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"}})  # fmt: skip
    nbformat.write(nb, notebooks / "00_planted.ipynb")
    build_site(tmp_path / "build", tmp_path / "site", notebooks)
    return tmp_path / "site"


def test_site_loads_no_script_from_the_web_and_collapses_launchers(tmp_path):
    site = planted_course(tmp_path)
    page = (site / "00_planted.html").read_text()
    scripts = re.findall(r"<script[^>]*\bsrc=\"([^\"]+)\"", page)
    assert scripts and not [s for s in scripts if re.match(r"(https?:)?//", s)], scripts
    for src in scripts:  # every script it loads is in the site itself
        assert (site / src.split("?")[0]).is_file(), src
    assert "MathJax.js" in " ".join(scripts)
    assert not re.search(r"import\(\"https?:", page)  # nor a module imported from the web
    assert ('<details class="course-collapsed"><summary>launchers/planted.py (50 lines)'
            "</summary>") in page  # fmt: skip
    assert ">x49<" in page  # collapsed, not removed


@pytest.mark.slow
def test_site_typesets_its_mathematics_offline(tmp_path):
    site = planted_course(tmp_path)
    with sync_playwright()() as playwright:
        browser = launch_browser(playwright)
        try:
            page = browser.new_page()
            outside = []
            page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(
                ("file:", "data:")) else None)  # fmt: skip
            page.goto((site / "00_planted.html").as_uri())
            page.wait_for_function(
                "() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0"
                " && document.querySelectorAll('.MathJax, .MathJax_Display').length >= 2",
                timeout=30_000)  # fmt: skip
            page.screenshot(path=artifacts_dir("site") / "mathematics.png")
            assert outside == []
            assert not page.locator("details.course-collapsed").evaluate("d => d.open")
        finally:
            browser.close()
