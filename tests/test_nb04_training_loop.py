"""Notebook 04: the training loop grown step by step, and the proof that DDP == one process."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT, execute_notebook

import coursekit

FINAL = ROOT / "launchers" / "train_step6_amp_compile.py"


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3])  # 1 rank: each launcher's own test (test_launchers)
def test_training_loop_notebook(nproc, tmp_path):
    r = execute_notebook("04", tmp_path, NPROC=nproc)
    assert r["world_size"] == nproc and r["backend"] == "gloo"
    # it trains: the loss falls and the held-out accuracy rises, in every run
    assert r["loss_fell"] and r["final_loss"] < 0.8 * r["first_loss"]
    assert r["metric_rose"] and r["final_test_acc"] > r["initial_test_acc"] + 0.1
    assert r["sampler_set_epoch_reshuffles"] is True and r["sampler_padded_duplicates"] == 2
    assert r["tensorboard_tags"] == 5  # loss, lr, throughput, test accuracy, test loss
    # a crash after a checkpoint, then a resume: the same final parameters
    assert r["checkpoint_crashed_exit_code"] != 0 and r["resumed_from_step"] > 0
    assert r["resume_matches"] is True and r["resume_max_param_diff"] <= 1e-5
    if nproc == 2:  # 3 ranks: the bucket rebuild can reorder gloo's sum (see the notebook)
        assert r["resume_bitwise"] is True
    # the all-reduced evaluation is the single-process evaluation
    assert r["eval_equal"] is True and r["eval_distributed_acc"] == r["eval_single_process_acc"]
    # no_sync: K times fewer all-reduces than syncing every micro-batch, same parameters
    assert r["allreduces_no_sync"] == r["allreduces_large_batch"]
    assert r["allreduces_sync_every_micro_step"] == r["accum_steps"] * r["allreduces_no_sync"]
    assert r["accum_max_param_diff"] <= 1e-5  # SGD: rounding stays rounding-sized (fp32 atol)
    assert min(r["step_ms_fp32"], r["step_ms_bf16"], r["step_ms_compile"]) > 0
    # the compile pitfall: DDP(nn.Sequential) compiles nothing, DDP(Net) compiles
    assert r["compiled_graphs_sequential"] == 0 and r["compiled_graphs_net"] >= 1
    # the proof: equal within fp32 tolerance for every world size
    assert r["proof_passed"] is True and r["proof_max_abs_diff"] < 1e-5
    if nproc > 1:  # with one rank there is nothing to split: every case is equal
        assert r["proof_sum_unscaled_diff"] > 1e-3 and r["proof_batchnorm_diff"] > 1e-3
    assert r["proof_syncbn"] == "ran" or "GPU" in r["proof_syncbn"]


class Killed(Exception):
    pass


@pytest.mark.slow
def test_killed_after_a_checkpoint_resumes_to_the_same_parameters(setup, tmp_path):
    """A real kill (the runner kills the whole process tree) right after a checkpoint."""
    args = ["--train-size", 2048, "--test-size", 128, "--epochs", 3, "--checkpoint-every", 8]
    whole = coursekit.run_launcher(FINAL, args, setup=setup, nproc=2, name="whole", echo=False)

    def kill_after_first_checkpoint(rank, text):
        if text.startswith("checkpoint step"):
            raise Killed(text)

    with pytest.raises(Killed):
        coursekit.run_launcher(FINAL, args, setup=setup, nproc=2, name="killed", echo=False,
                               on_line=kill_after_first_checkpoint)
    killed_out = setup.runs_dir / "killed" / "out"
    assert not (killed_out / "metrics.json").exists(), "the run finished before it was killed"
    state = torch.load(killed_out / "checkpoint.pt", weights_only=True)
    assert 0 < state["step"] < whole.metrics["steps"]

    resumed = coursekit.run_launcher(FINAL, [*args, "--resume", killed_out / "checkpoint.pt"],
                                     setup=setup, nproc=2, name="resumed", echo=False)
    assert resumed.metrics["start_step"] == state["step"]
    a = torch.load(whole.out_dir / "checkpoint.pt", weights_only=True)
    b = torch.load(resumed.out_dir / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] == whole.metrics["steps"]
    for name in a["model"]:
        torch.testing.assert_close(b["model"][name], a["model"][name], rtol=0, atol=1e-6)


def test_fp16_on_cpu_is_refused_before_any_process_starts():
    proc = subprocess.run(
        [sys.executable, str(FINAL), "--amp", "fp16", "--device", "cpu"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--amp fp16 needs --device cuda" in proc.stderr
