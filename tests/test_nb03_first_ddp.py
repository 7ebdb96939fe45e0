"""Notebook 03: the first DDP run, with 1, 2 (the CPU default) and 3 ranks."""

import pytest
from conftest import execute_notebook


@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_first_ddp_run(nproc, tmp_path):
    results = execute_notebook("03", tmp_path, NPROC=nproc)
    assert results["world_size"] == nproc
    assert results["loss_fell_on_every_rank"] is True
    assert results["worst_last_to_first_ratio"] < 0.5
    assert results["last_loss_rank0"] < results["first_loss_rank0"]
    assert results["replicas_identical"] is True
    assert results["classic_form"].startswith("skipped") or results["classic_form"] == "ran"
