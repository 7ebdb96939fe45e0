"""environment.yml stays in step with requirements.txt, the one source of truth."""

import re

import yaml
from conftest import ROOT
from test_docker import pins

PATH = ROOT / "environment.yml"


def test_environment_yml_in_step_with_requirements():
    env = yaml.safe_load(PATH.read_text())
    deps = env["dependencies"]
    pip_part = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "-r requirements.txt" in pip_part, "the pip part installs requirements.txt"
    conda = [d for d in deps if isinstance(d, str)]
    assert "python=3.11" in conda  # what the course is tested with
    # any package conda installs must not contradict a requirements.txt pin
    pinned = {k.lower(): v for k, v in pins("requirements.txt").items()}
    for dep in conda:
        name, _, version = dep.partition("=")
        if name.lower() in pinned and version:
            assert version.split("=")[0] == pinned[name.lower()], dep
    assert "conda-forge" in env["channels"]
    # the conda-forge CUDA route is noted, with the torch version of the pin
    noted = re.search(r"`pytorch=([\d.]+)=\*cuda\*`", PATH.read_text())
    assert noted and noted.group(1) == pinned["torch"]


def test_the_course_jupyterlab_overrides_are_valid_and_installed_by_setup():
    """jupyter/overrides.json sets only settings JupyterLab's schemas know, to allowed values
    (no "Jupyter news" question), and `make setup` installs it where JupyterLab reads it."""
    import json
    import sys
    from pathlib import Path

    import jsonschema

    overrides = json.loads((ROOT / "jupyter" / "overrides.json").read_text())
    schemas = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
    for plugin, settings in overrides.items():
        package, _, name = plugin.partition(":")
        jsonschema.validate(settings, json.loads((schemas / package / f"{name}.json").read_text()))
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    makefile = (ROOT / "Makefile").read_text()
    stamp_rule = makefile[makefile.index("$(STAMP):"):].split("\n\n")[0]
    assert "jupyter/overrides.json" in stamp_rule.splitlines()[0], "setup reruns when it changes"
    target = r"\$\(VENV\)/share/jupyter/lab/settings/overrides\.json"
    assert re.search(r"cp jupyter/overrides\.json " + target, stamp_rule)
    assert "install -D" not in makefile, "GNU install -D is not on macOS: mkdir -p and cp"


def test_make_lab_opens_and_as_root_says_it_allows_root(tmp_path):
    """make lab starts JupyterLab from .venv; run as root (cloud GPU boxes, containers), where
    Jupyter refuses without --allow-root, it passes it and says so."""
    import os
    import signal
    import subprocess
    import time

    env = {**os.environ, "BROWSER": "true", "JUPYTER_RUNTIME_DIR": str(tmp_path),
           "JUPYTER_PORT": "0"}  # fmt: skip
    proc = subprocess.Popen(["make", "lab"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen, deadline = [], time.monotonic() + 90
    try:
        for line in proc.stdout:
            seen.append(line)
            if "http://" in line and "/lab" in line or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    text = "".join(seen)
    assert "/lab" in text and "http://" in text, text[-2000:]
    if os.geteuid() == 0:
        assert "running as root, so JupyterLab gets --allow-root" in text
