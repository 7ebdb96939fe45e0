"""Notebook 05: DP vs DDP measured. Timing figures are ratios from one run of the notebook;
a test bounds one only where a run on an idle machine cannot miss it, whatever the CPU.
The sentences the notebook states are its claims (checked by conftest's claims contract)."""

import copy
import importlib.util
import json
import re
import subprocess
import sys

import nbformat
import pytest
import torch
from conftest import ROOT, execute_notebook

from coursekit import bench, evaluate

NOTEBOOK = ROOT / "notebooks" / "05_dp_vs_ddp_measured.ipynb"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nb05")
    figures = execute_notebook("05", tmp, NPROC=2)
    figures["_dir"] = tmp / "results"
    print(json.dumps({k: v for k, v in figures.items() if k != "_dir"}, indent=1))  # on failure
    return figures


@pytest.fixture(scope="module")
def launcher():
    spec = importlib.util.spec_from_file_location("ddp_bench", ROOT / "launchers" / "ddp_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timing_bound(results):
    """Whether this run's timings may be bounded: the machine was not busy with other programs
    when the benchmark started (a 1-minute load average no higher than the CPU count; our own
    runs before it count too). On a busy machine the claims, not the tests, tell the story."""
    if results["load_average_before"] > results["cpus"]:
        pytest.skip(f"load average {results['load_average_before']} on {results['cpus']} CPUs: "
                    "timings of a busy machine are not bounded (see the notebook's claims)")


def claim_about(results, words):
    (found,) = [c for c in results["claims"] if words in c["text"]]
    return found


def test_ddp_beats_dataparallel_on_the_python_heavy_model(results):
    # the GIL serialises DP's forward threads (about 2/3 of this model's step); DDP's two
    # processes do not share it. An idle 2-core machine gives well above 1.3; the test asks
    # only for DDP ahead, a bound that an idle run cannot miss on any CPU (a busy machine
    # can: then the claim, not the test, says so)
    claim = claim_about(results, "Python-heavy model")
    assert claim["figures"]["ratio"] == pytest.approx(results["ddp_over_dp_python"], rel=1e-3)
    timing_bound(results)
    assert results["ddp_over_dp_python"] > 1.0, results


def test_the_matmul_model_is_reported_whichever_way_it_goes(results):
    claim = claim_about(results, "matmul model")
    assert claim["otherwise"] and "release the GIL" in claim["otherwise"]
    for ratio in (0.5, 2.0):  # both branches of the hardware-dependent conclusion
        assert evaluate(claim["condition"], {**claim["figures"], "ratio": ratio}) is (ratio > 1)


def test_python_claim_branches_go_each_way(results):
    claim = claim_about(results, "Python-heavy model")
    assert evaluate(claim["condition"], {**claim["figures"], "ratio": 2.0}) is True
    assert evaluate(claim["condition"], {**claim["figures"], "ratio": 1.1}) is False


def test_dataparallel_rebuilt_equals_one_process_in_float64(launcher):
    # faithful DP: outputs gathered, the loss over the whole batch on device 0, so one step
    # equals one process's step with the same batch (float64: only rounding, ~1e-16)
    torch.set_default_dtype(torch.float64)
    try:
        cpu = torch.device("cpu")
        for make, width in ((lambda: launcher.mlp(8, 2), 8),
                            (lambda: launcher.PythonHeavy(4, 3, 8), 4)):
            torch.manual_seed(0)
            model = make()
            single = copy.deepcopy(model)
            torch.manual_seed(1)
            dp_step = launcher.dp_step_fn(model, 6, width, 3, cpu)
            torch.manual_seed(1)
            one = launcher.Trainer(single, 6, width, cpu)  # draws the same batch
            dp_step()
            one.step()
            diff = max((a.grad - b.grad).abs().max().item()
                       for a, b in zip(model.parameters(), single.parameters(), strict=True))
            assert diff < 1e-12, diff
    finally:
        torch.set_default_dtype(torch.float32)


def test_buckets_ddp_made(results):
    # torch 2.13: the default keeps a first bucket of 1 MiB, an explicit cap (even 25) does
    # not (_BucketCapacityConfig); 50 x Linear(256, 256) = 100 tensors, 13.2 MB of gradients
    assert results["buckets_default"] == 2
    assert results["buckets_cap_25"] == 1
    assert results["buckets_cap_4"] == 4
    assert results["buckets_cap_1"] == 13
    assert results["buckets_cap_0p25"] == 50
    assert claim_about(results, "explicit")["held"] is True


def test_ddp_buckets_beat_blocking_per_parameter_all_reduce(results):
    # 100 blocking calls against 2 buckets started during backward: about 2.7x on 2 cores;
    # 1.5 leaves room for any CPU, alpha being a property of gloo on loopback
    timing_bound(results)
    assert results["ddp_vs_blocking_ratio"] >= 1.5, results


def test_compute_bound_end_scales_better_than_communication_bound_end(results):
    # batch 2 per rank: about a millisecond of compute against 4 MB of gradients; batch 4096:
    # hundreds of milliseconds against the same 4 MB (2-core machines: about 0.3 against 0.75)
    timing_bound(results)
    clearly_lower = results["sweep_compute_bound_efficiency"] - 0.2
    assert results["sweep_comm_bound_efficiency"] <= clearly_lower, results


def test_alpha_beta_position_is_a_claim(results):
    claim = claim_about(results, "alpha-beta line")
    assert claim["figures"]["points"] == results["sweep_points"] == 3
    assert claim["figures"]["above"] == results["prediction_points_above"]


def test_overlap_and_the_trace(results):
    assert 0 <= results["overlap_fraction"] <= 1
    assert results["trace_saved"] is True
    trace = json.loads((results["_dir"] / "05_ddp_step_trace.json").read_text())
    assert trace["traceEvents"]


def test_memory_and_plots(results):
    assert results["bucket_cap_best_mb"] in {0.25, 1.0, 4.0, 25.0}
    assert results["efficiency_1"] > 0 and results["efficiency_2"] > 0
    assert results["dp_device0_memory_ratio"] > 1  # DP: device 0 carries more (calculator)
    assert results["ddp_memory_balance"] == pytest.approx(1.0)  # DDP: equal ranks
    assert results["ddp_lines"] >= 5 and results["ddp_log_files"] >= 2
    for name in ("throughput", "memory", "efficiency_sweep", "buckets", "timeline",
                 "reported_case", "decision_path"):
        assert (results["_dir"] / "05_plots" / f"{name}.png").stat().st_size > 1000


def test_every_measured_outcome_is_a_claim(results):
    texts = " ".join(c["text"] for c in results["claims"])
    for words in ("Python-heavy", "matmul model", "alpha-beta line", "blocking all-reduce",
                  "gradient_as_bucket_view", "inside backward", "reported order"):
        assert words in texts, words
    assert len(results["claims"]) >= 10


def test_no_lesson_refers_to_a_seed_article():
    text = "\n".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells)
    assert not re.search(r"\bthe seed\b|seed article|seed's", text, re.IGNORECASE)
    assert "reported, not measured" in text


def test_bench_command_refuses_bad_parameters_before_starting_anything():
    proc = subprocess.run([sys.executable, "-m", "coursekit.bench", "--nproc", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "NPROC=0" in proc.stderr


def test_bench_command_points_at_notebook_05():
    assert bench.NOTEBOOK.exists()


def test_bench_report_keys_are_the_notebooks_figures(results):
    assert set(bench.KEYS) <= set(results), set(bench.KEYS) - set(results)
