"""Every notebook runs headlessly under papermill (SMOKE sizes) and writes honest results."""

import json
import sys
import time
from pathlib import Path

import papermill
import pytest
from conftest import NOTEBOOKS, ROOT
from traitlets.config import Config

IPC = Config({"KernelManager": {"transport": "ipc"}})


def execute(notebook: Path, tmp_path: Path, **parameters) -> dict:
    """Run ``notebook`` with papermill; return its results file."""
    results_dir = tmp_path / "results"
    papermill.execute_notebook(
        str(notebook), str(tmp_path / notebook.name),
        parameters={"SMOKE": True, "RESULTS_DIR": str(results_dir), **parameters},
        cwd=str(notebook.parent), kernel_name="python3", progress_bar=False, config=IPC,
    )  # fmt: skip
    return json.loads((results_dir / f"{notebook.stem}.json").read_text())


def check_00(results: dict, nproc: int) -> None:
    assert results["ready"] is True and results["allreduce_ok"] is True
    assert results["allreduce_world_size"] == max(2, nproc)
    assert results["verdict"].startswith("READY")
    # the kernel named "python3" is this environment's Python, not some other one on the machine
    kernel_python = Path(results["python_executable"]).absolute()
    assert kernel_python.is_relative_to(Path(sys.prefix).absolute())


def check_03(results: dict, nproc: int) -> None:
    assert results["world_size"] == nproc
    assert results["loss_fell_on_every_rank"] is True
    assert results["worst_last_to_first_ratio"] < 0.5
    assert results["last_loss_rank0"] < results["first_loss_rank0"]
    assert results["replicas_identical"] is True
    assert results["classic_form"].startswith("skipped") or results["classic_form"] == "ran"


CHECKS = {"00_environment_check": check_00, "03_your_first_ddp_run": check_03}
RUNS = [(nb, None) for nb in NOTEBOOKS] + [
    (ROOT / "notebooks" / "03_your_first_ddp_run.ipynb", n) for n in (1, 3)
]  # the default (2 on CPU) runs above


def test_every_notebook_has_result_checks():
    assert sorted(CHECKS) == [nb.stem for nb in NOTEBOOKS]


@pytest.mark.slow
@pytest.mark.parametrize(
    "notebook, nproc", RUNS, ids=[f"{nb.stem}-nproc{n or 'default'}" for nb, n in RUNS]
)
def test_notebook_runs(notebook, nproc, tmp_path):
    parameters = {} if nproc is None else {"NPROC": nproc}
    results = execute(notebook, tmp_path, **parameters)
    assert results["notebook"] == notebook.stem
    assert results["tier"] in {"cpu", "single-gpu", "multi-gpu"}
    assert results["smoke"] is True
    CHECKS[notebook.stem](results, results["nproc"])


@pytest.mark.parametrize(
    "parameters, env, message",
    [
        ({"NPROC": 0}, {}, "NPROC=0 cannot be used"),
        ({"DEVICE": "cuda"}, {"CUDA_VISIBLE_DEVICES": ""}, "DEVICE='cuda' cannot be used"),
        ({"TIMEOUT_S": "soon"}, {}, "TIMEOUT_S='soon' cannot be used"),
    ],
)
def test_bad_parameters_stop_the_notebook_before_any_run(parameters, env, message, tmp_path,
                                                         monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the kernel inherits the environment
    notebook = ROOT / "notebooks" / "03_your_first_ddp_run.ipynb"
    start = time.monotonic()
    with pytest.raises(papermill.PapermillExecutionError) as caught:
        execute(notebook, tmp_path, **parameters)
    assert time.monotonic() - start < 10
    assert caught.value.ename == "ParameterError" and message in caught.value.evalue
    assert not (tmp_path / "runs").exists(), "a run started despite the bad parameter"
