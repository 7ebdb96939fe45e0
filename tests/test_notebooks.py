"""Every notebook has its own test module (tests/test_<notebook stem>.py) that runs it under
papermill and asserts on its results file; bad parameters stop a notebook before any run."""

import time
from pathlib import Path

import papermill
import pytest
from conftest import NOTEBOOKS, execute_notebook

TESTS = Path(__file__).parent


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_has_a_test_module(notebook):
    modules = list(TESTS.glob(f"test_{notebook.stem}.py"))
    assert modules, f"add tests/test_{notebook.stem}.py that runs {notebook.name}"
    assert "execute_notebook(" in modules[0].read_text()


BAD_PARAMETERS = [
    ({"NPROC": 0}, {}, "NPROC=0 cannot be used"),
    ({"DEVICE": "cuda"}, {"CUDA_VISIBLE_DEVICES": ""}, "DEVICE='cuda' cannot be used"),
    ({"TIMEOUT_S": "soon"}, {}, "TIMEOUT_S='soon' cannot be used"),
]


def bad_parameter_cases():
    """Every notebook with one bad parameter (taken in turn), notebook 00 with all of them:
    each notebook stops before any run, and each message is checked."""
    for i, notebook in enumerate(NOTEBOOKS):
        for j, case in enumerate(BAD_PARAMETERS):
            if i == 0 or j == i % len(BAD_PARAMETERS):
                yield pytest.param(notebook, *case, id=f"{notebook.stem}-{next(iter(case[0]))}")


@pytest.mark.parametrize("notebook, parameters, env, message", list(bad_parameter_cases()))
def test_bad_parameters_stop_the_notebook_before_any_run(
    notebook, parameters, env, message, tmp_path, monkeypatch
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the kernel inherits the environment
    start = time.monotonic()
    with pytest.raises(papermill.PapermillExecutionError) as caught:
        execute_notebook(notebook.name[:2], tmp_path, **parameters)
    assert time.monotonic() - start < 10
    assert caught.value.ename == "ParameterError" and message in caught.value.evalue
    assert not (tmp_path / "runs").exists(), "a run started despite the bad parameter"


def test_a_notebook_run_from_the_course_folder_finds_its_launchers(tmp_path):
    """papermill starts the kernel in the caller's folder unless told otherwise: an instructor
    running `papermill notebooks/03_... out.ipynb` from the course folder."""
    notebook = next(nb for nb in NOTEBOOKS if nb.name.startswith("00"))  # the shortest one
    papermill.execute_notebook(
        str(notebook), str(tmp_path / notebook.name), kernel_name="python3", progress_bar=False,
        parameters={"SMOKE": True, "RESULTS_DIR": "results"}, cwd=str(tmp_path),
    )  # fmt: skip
    # the RESULTS_DIR it was given stays relative to the folder it was given in
    assert (tmp_path / "results" / f"{notebook.stem}.json").exists()
    executed = (tmp_path / notebook.name).read_text()
    assert "so it now works in" in executed
