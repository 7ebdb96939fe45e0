"""Notebook 05, accumulation, mixed precision, compile, the proof: claims and results record."""

from __future__ import annotations

import statistics

from ..results import save_results
from . import closing

STEM = "05_accumulation_mixed_precision_and_the_proof"
SPREAD = "quartiles of the steps {ratio_low:.2f}x to {ratio_high:.2f}x"  # a compare's spread


def _saving(accum: dict) -> float:
    """How many times fewer all-reduces no_sync made than syncing every micro-batch."""
    return accum["sync every micro-batch"]["allreduces"] / accum["no_sync"]["allreduces"]


def _gains(accum: dict) -> dict:
    """Each run's test accuracy gain, from before training to the end."""
    return {name: m["evals"][-1]["test_acc"] - m["evals"][0]["test_acc"]
            for name, m in accum.items()}


def plot_proof(proof: dict) -> None:
    """float64: DDP against one process per case; float32: DDP against each of one process's
    summation orders, beside those orders against each other (the noise floor, pair by pair)."""
    import matplotlib.pyplot as plt

    cases, equal = proof["cases"], proof["f64_equal_below"]
    ddp, pairs = proof["fp32_ddp_vs_orders"], proof["fp32_floor"]
    tiny = 1e-18  # a place on the log axis for an exact 0
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3), gridspec_kw={"width_ratios": [3, 2]})
    names = list(cases)
    ax1.bar(names, [max(cases[n]["max_abs_diff"], tiny) for n in names],
            color=["tab:green" if cases[n]["max_abs_diff"] < equal else "tab:red" for n in names])
    ax1.axhline(equal, color="gray", linestyle=":", label="'equal' below 1e-9")
    ax1.set(title="float64: DDP vs one process", xlabel="case (loss, normalisation)")
    ax1.legend(loc="upper left", bbox_to_anchor=(0, -0.3), fontsize=8)  # below: covers no bar
    for x, (values, color) in enumerate([(ddp.values(), "tab:blue"), (pairs.values(), "gray")]):
        values = sorted(max(v, tiny) for v in values)
        offsets = [0.3 * (i / max(1, len(values) - 1) - 0.5) for i in range(len(values))]
        ax2.scatter([x + o for o in offsets], values, color=color, s=14)
    ax2.set_xticks([0, 1], [f"DDP vs each order ({len(ddp)})", f"order vs order ({len(pairs)})"])
    ax2.set(title=f"float32: one process's {len(ddp)} orders pairwise (gray), DDP vs each (blue)",
            xlim=(-0.6, 1.6), xlabel="the runs compared (each point: two runs)")
    for ax in (ax1, ax2):
        ax.set(yscale="log", ylim=(tiny / 10, 1), ylabel="max |param difference|")
        ax.title.set_fontsize(9)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"{proof['world_size']} rank(s) x {proof['global_batch'] // proof['world_size']} "
                 f"vs one process x {proof['global_batch']}, {proof['steps']} SGD steps; points "
                 "and bars at 1e-18 are exact zeros", fontsize=9)  # fmt: skip
    plt.tight_layout()
    plt.show()
    if proof["world_size"] == 1:
        print("1 rank: nothing to split, DDP runs the single process's operations on the whole "
              "batch")


def allreduces_k8_why(guess, *, k4: dict, k8: dict) -> str:
    """What a wrong prediction of the K = 8 runs' all-reduces (no_sync, sync every micro-batch)
    missed, named from the runs' counted facts: ``k4`` and ``k8``, {run: its metrics}, the
    three runs with K = 4 and the two with K = 8."""
    no_sync, sync_every = (m["allreduces"] for m in k8.values())
    steps = next(iter(k8.values()))["steps"]  # optimizer steps of each K = 8 run
    K = round(sync_every / no_sync)  # micro-batches per step: every one synced
    per_bucket = no_sync // steps  # all-reduces per synchronised backward (buckets)
    general = (f"one all-reduce per bucket ({per_bucket}) and synchronised backward: no_sync lets "
               f"only the last of the K = {K} micro-batches sync, once per optimizer step "
               f"({steps} steps); syncing every micro-batch, all {K} do")
    if not isinstance(guess, list | tuple) or len(guess) != 2:
        return "give two counts, (no_sync, sync every micro-batch): " + general
    a, b = guess
    k4_sync = k4["sync every micro-batch"]["allreduces"]
    k4_K = round(k4_sync / k4["no_sync"]["allreduces"])
    for wrong, mistake in [  # the first that fits is named
        ((a, b) == (no_sync / steps, sync_every / steps), f"those are per optimizer step: each "
         f"run makes {steps}, and the hook counts the whole run"),
        ((a, b) in ((2 * no_sync, 2 * sync_every), (no_sync / 2, sync_every / 2)), f"the steps "
         f"stay {steps}: {K} micro-batches of half the samples are the same samples per step"),
        (a == sync_every, "no_sync skips the all-reduce of every micro-batch but the last: one "
         "per optimizer step, not one per micro-batch"),
        (a == 2 * no_sync, f"no_sync's count does not grow with K: the last micro-batch syncs "
         f"once per step, however many come before it ({steps} steps, as with K = 4)"),
        ((K - 1) * steps in (a, b), f"{K - 1} per step is K - 1: no_sync skips K - 1 "
         f"all-reduces and keeps 1; syncing every micro-batch makes all {K}"),
        (b == k4_sync, f"syncing every micro-batch all-reduces once per micro-batch: {K} per step "
         f"now, not {k4_K}"),
        (b in (no_sync, a), "without no_sync every micro-batch's backward all-reduces: K per "
         "optimizer step"),
    ]:
        if wrong:
            return mistake
    return general


def claim_accumulation(claims, *, K: int, accum: dict, accum_diff: dict, ms: dict) -> None:
    """The all-reduce counts, parameters, learning and step times of the accumulation runs."""
    spread = SPREAD
    claims.check(
        "no_sync() all-reduces K = {K} times less often than syncing every micro-batch, and "
        "exactly as often as the large batch", "saving == K and no_sync == large_batch",
        K=K, saving=_saving(accum), no_sync=accum["no_sync"]["allreduces"],
        large_batch=accum["large batch"]["allreduces"],
        otherwise="the hook counted {no_sync} (no_sync) and {large_batch} (large batch) calls, a "
        "ratio of {saving:.2f}: the runs reduced other numbers of buckets (not measured here)")
    claims.check(
        "no_sync accumulation lands as close to the large batch's parameters as syncing every "
        "micro-batch does: two orders of the same sums", "no_sync <= 2 * sync_every",
        no_sync=accum_diff["no_sync"], sync_every=accum_diff["sync every micro-batch"],
        otherwise="no_sync moved {no_sync:.1e} from the large batch, syncing every micro-batch "
        "{sync_every:.1e}: likely a rounding difference that flipped a discrete choice (a "
        "max-pool's winner, a ReLU at zero), not measured here")
    gains = _gains(accum)
    claims.check(
        "all three accumulation runs learn: their test accuracy rose by {least:.3f} or more "
        "(from about chance, {chance:.3f})", "least > 0", least=min(gains.values()), chance=1 / 16,
        otherwise="a run's test accuracy rose by only {least:.3f}: likely too few steps at these "
        "sizes for SGD without normalisation (not measured here)")
    claims.compare(
        "syncing every micro-batch took {ratio:.2f}x no_sync's time per step (" + spread
        + "), with {extra} more all-reduces per step", less=ms["no_sync"],
        more=ms["sync every micro-batch"], paired=False, extra=K - 1,
        otherwise="syncing every micro-batch stepped faster than no_sync here ({ratio:.2f}x, "
        + spread + "): likely other load on the cores between the runs, not measured here",
        tie="no_sync and syncing every micro-batch stepped alike here ({ratio:.2f}x, " + spread
        + "): {extra} more all-reduces per step cost less than the steps vary")
    claims.compare(
        "K = {K} micro-batches with no_sync took {ratio:.2f}x the large batch's time per step ("
        + spread + "): the same samples and all-reduces in {K} passes", K=K, paired=False,
        less=ms["large batch"], more=ms["no_sync"],
        otherwise="the {K} micro-batches stepped faster than the large batch here ({ratio:.2f}x, "
        + spread + "): likely other load between the runs, not measured here",
        tie="the {K} micro-batches and the large batch stepped alike here ({ratio:.2f}x, "
        + spread + ")")


def claim_speed(claims, *, speed: dict, speed_ms: dict, hardware: str, backend: str) -> None:
    """bf16 autocast and torch.compile against eager fp32, and whether compile paid back."""
    spread = SPREAD
    first = speed["compile"]["first_step_s"]
    fp32_median = statistics.median(speed_ms["fp32"])
    claims.compare(
        "bf16 autocast stepped {ratio:.2f}x faster than fp32 on {hardware} (" + spread + ")",
        less=speed_ms["bf16 autocast"], more=speed_ms["fp32"], paired=False, hardware=hardware,
        slower=statistics.median(speed_ms["bf16 autocast"]) / fp32_median,
        otherwise="bf16 autocast took {slower:.2f}x fp32's time per step on {hardware} ("
        + spread + "): likely its casts cost more than bf16 saved at this size, not measured here",
        tie="bf16 autocast and fp32 stepped alike on {hardware} ({ratio:.2f}x, " + spread + ")")
    compiled = claims.compare(
        "torch.compile ({backend}) stepped {ratio:.2f}x faster than eager fp32 (" + spread
        + "), after a first step of {first:.1f} s", less=speed_ms["compile"],
        more=speed_ms["fp32"], paired=False, backend=backend, first=first,
        slower=statistics.median(speed_ms["compile"]) / fp32_median,
        otherwise="torch.compile ({backend}) took {slower:.2f}x eager fp32's time per step here ("
        + spread + "), after a first step of {first:.1f} s: at this size it does not pay off",
        tie="torch.compile ({backend}) and eager fp32 stepped alike here ({ratio:.2f}x, " + spread
        + "): no saving per step pays back its first step of {first:.1f} s")
    extra_s = max(0.0, first - speed["fp32"]["first_step_s"])  # the compiling, about
    payback = ("compile's first step, {extra:.1f} s longer than eager's, was paid back within "
               "this run's {steps} steps (after {payback:.0f}, {saved:.2f} ms saved per step)")
    if compiled.outcome == "held":
        saved_ms = fp32_median - statistics.median(speed_ms["compile"])
        claims.check(
            payback, "payback <= steps", extra=extra_s, steps=speed["compile"]["steps"],
            saved=saved_ms, payback=extra_s * 1000 / saved_ms,
            otherwise="compile's first step, {extra:.1f} s longer than eager's, takes "
            "{payback:.0f} steps to pay back, more than this run's {steps}")
    else:
        claims.skip(
            payback, steps=speed["compile"]["steps"], extra=extra_s,
            expect="the steps saved would be counted until they repay compile's first step "
            "({extra:.1f} s longer than eager's)",
            why="its steps were not measurably faster than eager fp32's here (above)")


def claim_compile_graphs(claims, *, sequential_graphs: int, net_graphs: int,
                         torch_version: str) -> None:  # fmt: skip
    """How many graphs Dynamo captured of DDP(nn.Sequential) and of DDP(Net), both counted by
    torch._dynamo.explain in the kernel."""
    claims.check(
        "Dynamo captures no graph of DDP(nn.Sequential(...)) here and {net_graphs} of "
        "DDP(Net()), both counted by torch._dynamo.explain",
        "sequential_graphs == 0 and net_graphs >= 1",
        sequential_graphs=sequential_graphs, net_graphs=net_graphs, torch=torch_version,
        otherwise="with torch {torch} torch._dynamo.explain counted {sequential_graphs} graph(s) "
        "of DDP(nn.Sequential) and {net_graphs} of DDP(Net): this release compiles differently, "
        "so the pitfall may be gone (or new): the counts are what to trust")


def claim_proof(claims, *, proof: dict) -> None:
    """DDP == one process: in float64 to rounding, in float32 within one process's own
    reorderings, and the planted mistakes far above that floor."""
    cases, floor = proof["cases"], proof["fp32_floor"]
    floor_max = max(floor.values())
    claims.check(
        "in float64, DDP over {ranks} rank(s) equals one process with the global batch (max "
        "difference {mean:.1e}; a mean loss) and so does a sum loss with DDP's lr x N "
        "({sum_scaled:.1e})", "mean < 1e-9 and sum_scaled < 1e-9", ranks=proof["world_size"],
        mean=cases["mean"]["max_abs_diff"], sum_scaled=cases["sum_scaled"]["max_abs_diff"],
        otherwise="the float64 difference is {mean:.1e}: more than rounding, so DDP did not take "
        "the single process's step (a bug, not noise: the launcher asserts this)")
    ddp = proof["fp32_ddp_vs_orders"]
    claims.check(
        "in float32, DDP differs from one process summing the same batches in {orders} orders by "
        "{ddp_min:.1e} to {ddp_max:.1e}: the size of those orders' differences from each other "
        "({floor_min:.1e} to {floor_max:.1e}, pair by pair)", "ddp_max <= 2 * floor_max",
        orders=len(ddp), ddp_min=min(ddp.values()), ddp_max=max(ddp.values()),
        floor_min=min(floor.values()), floor_max=floor_max, otherwise="DDP's fp32 difference "
        "from one process's orders, up to {ddp_max:.1e}, exceeds twice the largest difference "
        "between two of them ({floor_max:.1e}): likely a discrete choice (a max-pool's winner, "
        "a ReLU at zero) flipped by rounding, not measured here; float64 decides")
    if proof["world_size"] > 1:
        claims.check(
            "the planted mistakes stand far above the fp32 noise floor: a sum loss at the same lr "
            "moves {sum:.2g}, BatchNorm's per-rank statistics {batchnorm:.2g}, against "
            "{floor_max:.1e}", "sum > 100 * floor_max and batchnorm > 100 * floor_max",
            sum=cases["sum"]["max_abs_diff"], batchnorm=cases["batchnorm"]["max_abs_diff"],
            floor_max=floor_max,
            otherwise="a planted mistake moved the parameters by less than 100x the noise floor "
            "({sum:.1e}, {batchnorm:.1e} against {floor_max:.1e}): likely too few steps or too "
            "small a learning rate, not measured here")


def save(setup, claims, tasks, *, proof: dict, K: int, steps: int, accum: dict, k8: dict,
         accum_diff: dict, ms: dict, speed: dict, speed_ms: dict, compile_backend: str,
         net_graphs: int, sequential_graphs: int) -> None:  # fmt: skip
    """The results record."""
    cases, fp32, floor = proof["cases"], proof["fp32_mean"], proof["fp32_floor"]
    floor_max = max(floor.values())
    saving, gains = _saving(accum), _gains(accum)
    save_results(STEM, {
        "world_size": proof["world_size"], "cpu_capability": proof["cpu_capability"],
        "accum_steps": K,
        **{f"allreduces_{k}": accum[n]["allreduces"] for k, n in (
            ("large_batch", "large batch"), ("no_sync", "no_sync"),
            ("sync_every_micro_step", "sync every micro-batch"))},
        "no_sync_allreduce_saving": saving, "accum_optimizer_steps": steps,
        "allreduces_k8_no_sync": k8["no_sync"]["allreduces"],
        "allreduces_k8_sync_every_micro_step": k8["sync every micro-batch"]["allreduces"],
        "k8_optimizer_steps": k8["no_sync"]["steps"],
        "accum_min_test_acc_gain": min(gains.values()),
        "accum_max_param_diff_no_sync": accum_diff["no_sync"],
        "accum_max_param_diff_sync_every": accum_diff["sync every micro-batch"],
        **{f"step_ms_accum_{k}": statistics.median(ms[n]) for k, n in (
            ("large_batch", "large batch"), ("no_sync", "no_sync"),
            ("sync_every", "sync every micro-batch"))},
        **{f"step_ms_{k}": statistics.median(speed_ms[n]) for k, n in (
            ("fp32", "fp32"), ("bf16", "bf16 autocast"), ("compile", "compile"))},
        "compile_first_step_s": speed["compile"]["first_step_s"],
        "compile_backend": compile_backend,
        "compiled_graphs_net": net_graphs, "compiled_graphs_sequential": sequential_graphs,
        "compile_run_unique_graphs": speed["compile"]["compiled_graphs"],  # Dynamo's counters
        **{f"proof_f64_{k}_diff": cases[n]["max_abs_diff"] for k, n in (
            ("mean", "mean"), ("sum_scaled", "sum_scaled"), ("sum_unscaled", "sum"),
            ("batchnorm", "batchnorm"))},
        "proof_fp32_diff": fp32["max_abs_diff"], "proof_fp32_floor_min": min(floor.values()),
        "proof_fp32_floor_max": floor_max,
        "proof_fp32_ddp_vs_orders_max": max(proof["fp32_ddp_vs_orders"].values()),
        "proof_syncbn": (proof["syncbn"] if proof["syncbn"] == "ran"
                         else "not on this tier: " + proof["syncbn"]),
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
