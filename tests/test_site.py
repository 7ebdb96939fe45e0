"""The course website: every notebook gets a page, with the outputs of the verified run."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import nbformat
from conftest import NOTEBOOKS, ROOT

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
