"""Notebook 11, beyond DDP (sharding): its claims, plots, launcher import and results record."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..course import ROOT
from ..echo import headless
from ..results import load_results, save_results
from ..runner import run_launcher
from . import closing

STEM = "11_beyond_ddp_sharding"
MiB = 2**20
STRATEGIES = ("ddp", "zero", "fsdp")  # the ones the notebook runs
LABELS = {"ddp": "DDP", "zero": "DDP + ZeRO-1", "zero2": "ZeRO-2", "fsdp": "FSDP2"}
KINDS = ("param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes")  # a rank's record
STATE_KINDS = ("parameters", "gradients", "optimizer", "activations")  # memory.STATE_KINDS


def load_launcher(path):
    """Import a launcher as a module (its main() only runs under torchrun)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stacked(ax, x, parts, label_prefix="", hatch=None) -> None:
    """One bar of a rank's bytes, kind upon kind (parameters, gradients, optimizer, activations)."""
    bottom = 0
    for kind, value, color in zip(STATE_KINDS, parts, plt.cm.tab10.colors, strict=False):
        ax.bar(x, value / MiB, 0.35, bottom=bottom / MiB, color=color, hatch=hatch,
               label=f"{label_prefix}{kind}", edgecolor="white")
        bottom += value


def plot_ddp_ranks(ddp_ranks: list, predicted: dict, n_params: int) -> None:
    """Each DDP rank's bytes by kind, measured (plain) beside the calculator's (hatched)."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for r, held in enumerate(ddp_ranks):
        _stacked(ax, r - 0.2, [held[k] for k in KINDS], "" if r == 0 else "_")
        _stacked(ax, r + 0.2, list(predicted.values()), "_", hatch="//")
    ax.set_xticks(range(len(ddp_ranks)), [f"rank {r}" for r in range(len(ddp_ranks))])
    ax.set(xlabel="rank: measured (plain) | calculator (hatched)", ylabel="MiB",
           title=f"DDP, {n_params:,} parameters, fp32, AdamW: rank by rank")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # covers no bar
    plt.show()


def plot_state_per_rank(runs: dict, ddp_share: float) -> None:
    """Each strategy's state per rank (parameters, gradients, optimizer), against DDP's total
    state (all three) / N: what sharding all three kinds evenly would leave."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5), sharey=True)
    for ax, strategy in zip(axes, STRATEGIES, strict=True):
        ranks = runs[f"{strategy}-float32"]["ranks"]
        for r, held in enumerate(ranks):
            _stacked(ax, r, [held[k] for k in KINDS[:3]],
                     "" if r == 0 and strategy == "ddp" else "_")
        ax.axhline(ddp_share / MiB, color="k", ls="--", lw=1,
                   label="DDP's total state / N" if strategy == "ddp" else None)
        ax.set_xticks(range(len(ranks)), [f"rank {r}" for r in range(len(ranks))])
        ax.set(title=LABELS[strategy], xlabel="rank")
    axes[0].set_ylabel("MiB per rank (parameters, gradients, optimizer state)")
    fig.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.99, 0.9))  # beside the axes
    plt.show()


def alpha_beta(setup, N: int) -> tuple[float, float, str]:
    """Notebook 02's alpha (s) and beta (bytes/s) at N ranks, from its results, or measured
    now as it does (briefly, up to 16 MiB: the bandwidth shows); beta is inf where the time
    did not grow with the size (a fast link: t = alpha alone). And where they came from."""
    nb02 = setup.results_dir / "02_processes_ranks_and_collectives.json"
    nb02 = load_results(nb02.stem, setup.results_dir) if nb02.exists() else {}
    if nb02.get("nproc") == N:  # its beta: a number, or a sentence where the time was flat
        beta = nb02["beta_GBps"] * 1e9 if isinstance(nb02["beta_GBps"], float) else float("inf")
        return max(nb02["alpha_us"], 0.0) * 1e-6, beta, "notebook 02 results"
    rows = run_launcher(ROOT / "launchers" / "allreduce_bench.py", [
        "--min-bytes", "16K", "--max-bytes", "16M", "--factor", "4", "--iters", "5",
        "--warmup", "2"], setup=setup, name="bench", echo=False).metrics["sizes"]  # fmt: skip
    sizes = [row["bytes"] for row in rows]
    seconds = np.array([row["seconds"] for row in rows])  # notebook 02's fit: relative errors
    inv_beta, alpha = np.polyfit(sizes, seconds, 1, w=1 / seconds)
    if not inv_beta > 0:  # the time did not grow with the size: t = alpha alone, beta inf
        inv_beta, (alpha,) = 0.0, np.polyfit(sizes, seconds, 0, w=1 / seconds)
    beta = 1 / inv_beta if inv_beta else float("inf")
    return max(float(alpha), 0.0), beta, "allreduce_bench.py, just now"


def plot_tradeoff(step_ratio: dict, state_bytes: dict, comm_bytes: dict, N: int,
                  device: str) -> None:  # fmt: skip
    """Memory per rank against step time (measured), beside the bytes each step sends (model)."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.8))
    for s in STRATEGIES:
        ax.scatter(step_ratio[s], state_bytes[s] / MiB, s=80)
        ax.annotate(f"  {LABELS[s]}", (step_ratio[s], state_bytes[s] / MiB))
    ax.set(xlabel="median step time / DDP's (measured)", ylabel="MiB of state per rank (measured)",
           xlim=(0, 1.1 * max(step_ratio.values())),
           ylim=(0, 1.1 * max(state_bytes.values()) / MiB),
           title=f"{N} ranks, {device}: memory against time")  # fmt: skip
    bx.bar(range(3), [comm_bytes[s] / MiB for s in STRATEGIES], color="tab:gray")
    bx.set_xticks(range(3), [LABELS[s] for s in STRATEGIES])
    bx.set(xlabel="strategy", ylabel="MiB sent per rank per step (model)",
           title="communication per step")
    plt.show()


def draw_limits(gpu_gib=80, devices=16, activation_gib=30, unit_percent=10, dtype="float32",
                optimizer="adam") -> dict:  # fmt: skip
    """Each strategy's bytes per GPU against the parameter count, and the GPU's line: the
    largest model each fits ({strategy: parameters}, returned)."""
    from common import memory  # launchers/common: importable once coursekit.configure ran

    gpu, act = gpu_gib * 2**30, activation_gib * 2**30
    limits = {s: memory.max_params_that_fit(gpu, devices, s, dtype=dtype, optimizer=optimizer,
                                            activation_bytes=act, unit_fraction=unit_percent / 100)
              for s in memory.STRATEGIES}  # fmt: skip
    sizes = np.linspace(0, 1.3 * max(limits.values()) or 1, 200)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for s in memory.STRATEGIES:
        per_rank = [sum(memory.sharded_memory(p, devices, s, dtype=dtype, optimizer=optimizer,
                                              activation_bytes=act,
                                              unit_params=p * unit_percent / 100).values())
                    for p in sizes]  # fmt: skip
        ax.plot(sizes / 1e9, np.array(per_rank) / 2**30,
                label=f"{LABELS[s]}: fits up to {limits[s] / 1e9:.1f} B params")
    ax.axhline(gpu_gib, color="k", ls="--", label=f"{gpu_gib} GiB GPU")
    ax.set(xlabel="parameters (billions)", ylabel="GiB per GPU", ylim=(0, 2 * gpu_gib),
           title=f"{devices} GPUs, {dtype}, {optimizer}, {activation_gib} GiB of activations, "
                 f"FSDP unit {unit_percent}%")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    return limits


def limit_sliders() -> None:
    """draw_limits with sliders, in a live notebook (papermill's runs have no front end for
    them: a panel there hung)."""
    if headless():
        return
    import ipywidgets as widgets
    from common import memory
    from IPython.display import display

    display(widgets.interactive(
        draw_limits,
        gpu_gib=widgets.IntSlider(value=80, min=8, max=192, step=8, description="GPU GiB"),
        devices=widgets.IntSlider(value=16, min=1, max=64, description="GPUs"),
        activation_gib=widgets.FloatSlider(value=30, min=0, max=64, step=1,
                                           description="activ. GiB"),
        unit_percent=widgets.FloatSlider(value=10, min=0, max=100, step=1,
                                         description="FSDP unit %"),
        dtype=widgets.Dropdown(options=list(memory.DTYPE_BYTES), value="float32",
                               description="dtype"),
        optimizer=widgets.Dropdown(options=list(memory.OPTIMIZER_STATES), value="adam",
                                   description="optimizer"),
    ))  # fmt: skip


def claim_ddp_state(claims, *, ddp_state: list, ddp_state_error: float, n_params: int,
                    activation: int) -> None:  # fmt: skip
    """DDP's state per rank against the calculator, and against one batch's activations."""
    claims.check(
        "Every DDP rank held the same state, {bytes_per_param:.2f} bytes per parameter: the "
        "calculator's 16 (fp32, AdamW, gradients in DDP's buckets) within {ddp_state_error:.2%}",
        "ranks_differ == 0 and ddp_state_error < 0.01",
        bytes_per_param=ddp_state[0] / n_params, ddp_state_error=ddp_state_error,
        ranks_differ=max(ddp_state) - min(ddp_state),
        otherwise="the DDP ranks held {bytes_per_param:.2f} bytes per parameter (ranks differing "
                  "by {ranks_differ} B), {ddp_state_error:.2%} from the calculator: AdamW keeps a "
                  "'step' counter per tensor as well, and a model of many small tensors makes "
                  "that visible")  # fmt: skip
    claims.check(
        "The activations of one batch ({activation_mb:.2f} MiB) outweigh the state "
        "({state_mb:.2f} MiB) at this size",
        "activation_mb > state_mb", activation_mb=activation / MiB, state_mb=ddp_state[0] / MiB,
        otherwise="the state ({state_mb:.2f} MiB) outweighs one batch's activations "
                  "({activation_mb:.2f} MiB) here: the model's parameter count is large for this "
                  "batch and image size, which set the activations")  # fmt: skip


def claim_state_per_rank(claims, *, N: int, state_bytes: dict, worst_split: float) -> None:
    """The state per rank by stage, and the optimizer state against DDP's / N."""
    claims.check(
        "The state per rank fell with each sharding stage: DDP {ddp_mb:.2f} MiB, ZeRO-1 "
        "{zero_mb:.2f} MiB, FSDP2 {fsdp_mb:.2f} MiB (the most any of the {N} ranks held)",
        "ddp_mb > zero_mb and zero_mb > fsdp_mb", N=N,
        **{f"{s}_mb": state_bytes[s] / MiB for s in STRATEGIES},
        otherwise="the state per rank did not fall at every stage (DDP {ddp_mb:.2f}, ZeRO-1 "
                  "{zero_mb:.2f}, FSDP2 {fsdp_mb:.2f} MiB): on {N} ranks the shares are uneven "
                  "(ZeRO-1 hands out whole tensors; FSDP2 pads every tensor to a multiple of {N} "
                  "rows), and the largest share is what counts")  # fmt: skip
    claims.check(
        "ZeRO-1 and FSDP2 each kept DDP's optimizer state / {N} on every rank, within "
        "{worst_split:.1%}",
        "worst_split <= 0.2", N=N, worst_split=worst_split,
        otherwise="one rank's optimizer state was {worst_split:.1%} away from DDP's / {N}: ZeRO-1 "
                  "hands out whole tensors, and with few large tensors over many ranks an even "
                  "split is not possible")  # fmt: skip


def claim_same_float64(claims, *, param_diff64: dict, tolerance: float) -> None:
    claims.check(
        "In float64, ZeRO-1 and FSDP2 trained DDP's parameters: largest differences "
        "{zero_f64:.1e} and {fsdp_f64:.1e}, float64 rounding (below {tolerance:.1e}, a million "
        "times its machine epsilon)",
        "zero_f64 <= tolerance and fsdp_f64 <= tolerance",
        zero_f64=param_diff64["zero"], fsdp_f64=param_diff64["fsdp"], tolerance=tolerance,
        otherwise="in float64 ZeRO-1 differs from DDP by {zero_f64:.1e} and FSDP2 by "
                  "{fsdp_f64:.1e}: more than rounding can explain, so they did not compute the "
                  "same update here (a nondeterministic kernel, or a change to the launcher): "
                  "compare the parameters tensor by tensor")  # fmt: skip


def comm_model(comm_bytes: float, calls: dict, alpha: float, beta: float, N: int) -> float:
    """Notebook 02's alpha-beta model for one step: every call the run counted pays alpha,
    the bytes of the ring formulas 1/beta (memory.comm_seconds)."""
    from common import memory

    counted = {name: (0.0, n) for name, n in calls.items()}
    return memory.comm_seconds({"bytes": (comm_bytes, 0), **counted}, alpha, beta, N)


def claim_communication(claims, *, calls: dict, comm_bytes: dict, comm_time: dict, step_s: dict,
                        step_times: dict, labels: dict) -> None:  # fmt: skip
    """FSDP2's bytes against DDP's (the ring formulas), and each sharded step's time against
    DDP's (measured), with the share of it the alpha-beta model explains (calls counted)."""
    claims.check(
        "By the ring formulas FSDP2 sends {fsdp_over_ddp:.3f}x DDP's bytes per step, in {calls} "
        "collective calls",
        "fsdp_over_ddp > 1 and fsdp_over_ddp < 1.5",
        fsdp_over_ddp=comm_bytes["fsdp"] / comm_bytes["ddp"],
        calls=sum(calls["fsdp"].values()),
        otherwise="FSDP2 sends {fsdp_over_ddp:.3f}x DDP's bytes here: with one unit only (the "
                  "root) nothing is gathered twice")  # fmt: skip
    for s in ("zero", "fsdp"):
        extra_ms = (comm_time[s] - comm_time["ddp"]) * 1e3
        diff_ms = (step_s[s] - step_s["ddp"]) * 1e3
        claims.compare(
            "{strategy}'s step took longer than DDP's: {ratio:.2f}x (quartiles "
            "{ratio_low:.2f}x to {ratio_high:.2f}x); the alpha-beta model's extra communication "
            "({extra_ms:.1f} ms) is {share:.0%} of the {diff_ms:.1f} ms measured",
            less=step_times["ddp"], more=step_times[s], paired=False, strategy=labels[s],
            extra_ms=extra_ms, diff_ms=diff_ms, share=extra_ms / diff_ms if diff_ms > 0 else 0.0,
            otherwise="{strategy}'s step took {ratio:.2f}x DDP's here (quartiles "
                      "{ratio_low:.2f}x to {ratio_high:.2f}x): shorter, though the alpha-beta "
                      "model gives it {extra_ms:.1f} ms more communication per step",
            tie="{strategy}'s and DDP's steps took the same time here: {ratio:.2f}x, inside "
                "their spread ({ratio_low:.2f}x to {ratio_high:.2f}x); the model's extra "
                "communication is {extra_ms:.1f} ms")  # fmt: skip


def claim_limits(claims, *, limits: dict, strategies, devices: int, gpu_gib: float,
                 activation_gib: float, unit_percent: float) -> None:  # fmt: skip
    """The calculator's largest model on the picture's GPUs, growing with each stage."""
    claims.check(
        "On {devices} GPUs of {gpu_gib:g} GiB with {activation_gib:g} GiB of activations and an "
        "FSDP unit of {unit_percent:g}% the calculator's limit grows with each stage: DDP "
        "{ddp:.1f}, ZeRO-1 {zero:.1f}, ZeRO-2 {zero2:.1f}, FSDP2 {fsdp:.1f} billion parameters",
        "ddp < zero and zero < zero2 and zero2 < fsdp", devices=devices, gpu_gib=gpu_gib,
        activation_gib=activation_gib, unit_percent=unit_percent,
        **{s: limits[s] / 1e9 for s in strategies},
        otherwise="the calculator's limits (DDP {ddp:.1f}, ZeRO-1 {zero:.1f}, ZeRO-2 "
                  "{zero2:.1f}, FSDP2 {fsdp:.1f} billion) do not grow at every stage: FSDP2's "
                  "gathered unit outweighs what ZeRO-3 divides")  # fmt: skip


def fewest_gpus(params: float, bytes_per_param, room: float) -> int:
    """The fewest GPUs N for which params * bytes_per_param(N) fits in room bytes."""
    return next(n for n in range(1, 100_000) if params * bytes_per_param(n) <= room)


def gpus_why(guess, *, params: float, gpu_gib: float, activation_gib: float,
             unit_percent: float) -> str:  # fmt: skip
    """What decides the fewest GPUs for FSDP2 (fp32, AdamW) and, where the guess is what a
    known mistake gives, that mistake by name."""
    u, gib = unit_percent / 100, 2**30
    room, whole = (gpu_gib - activation_gib) * gib, gpu_gib * gib
    mistakes = (  # (the mistake, bytes per parameter on N GPUs, the room it assumed)
        ("the gathered unit left out (16/N bytes per parameter alone)", lambda n: 16 / n, room),
        ("the unit divided by N like the rest: it is gathered whole on every GPU",
         lambda n: (16 + 8 * u) / n, room),
        ("the unit's weights counted, not its gradients (backward holds both whole)",
         lambda n: 16 / n + 4 * u, room),
        ("the unit counted with its AdamW state (the optimizer steps the shards only)",
         lambda n: 16 / n + 16 * u, room),
        (f"the {activation_gib:g} GiB of activations forgotten", lambda n: 16 / n + 8 * u, whole),
        ("both the unit and the activations forgotten", lambda n: 16 / n, whole),
        ("GB taken for GiB", lambda n: 16 / n + 8 * u, (gpu_gib - activation_gib) * 1e9),
    )  # fmt: skip
    named = {}
    for mistake, per_param, assumed in mistakes:
        named.setdefault(fewest_gpus(params, per_param, assumed), mistake)
    rule = (f"Each GPU holds 16/N bytes per parameter (fp32 weights, gradients, AdamW's 2 "
            f"moments) plus the unit it gathers whole ({unit_percent:g}% of the parameters, "
            f"weights and gradients: 8 bytes each) in {gpu_gib:g} - {activation_gib:g} GiB")
    right = fewest_gpus(params, lambda n: 16 / n + 8 * u, room)
    if guess in named and guess != right:
        return f"{guess} is the answer with {named[guess]}. {rule}"
    return rule


def claim_sharded_reload(claims, *, N: int, difference: float) -> None:
    claims.check(
        "Reloaded into a fresh FSDP2 model on {N} ranks, the checkpoint gave the same outputs, "
        "bit for bit",
        "difference == 0", N=N, difference=difference,
        otherwise="the reloaded model's outputs differ by {difference:.1e}: the same shards in "
                  "the same layout run the same kernels, so some tensor was not restored (look "
                  "at the keys the load reported)")  # fmt: skip


def claim_single_process(claims, *, n: int, difference: float, tolerance: float,
                         same_classes: bool) -> None:  # fmt: skip
    claims.check(
        "One plain process read the sharded checkpoint: on {n} probe images its outputs match "
        "the sharded model's to {difference:.1e} (float64 rounding), the same predicted classes: "
        "{same_classes}",
        "difference <= tolerance and same_classes == True", n=n, difference=difference,
        tolerance=tolerance, same_classes=same_classes,
        otherwise="the plain process's outputs differ from the sharded model's by "
                  "{difference:.1e} (same classes: {same_classes}): more than float64 rounding, "
                  "so the load did not restore every tensor")  # fmt: skip


def save(setup, claims, tasks, *, launch, runs, n_params, ddp_state_error, activation, state_bytes,
         worst_split, step_ratio, comm_bytes, calls, units, root_params, alpha, beta,
         param_diff64, param_diff, f64_tolerance, sharded_reload_diff, single_process_diff,
         limits_80gb, strategies, gpus_for_20b) -> None:  # fmt: skip
    ranks = {s: runs[f"{s}-float32"]["ranks"] for s in STRATEGIES}
    save_results(STEM, {
        "world_size": launch.metrics["world_size"], "backend": launch.metrics["backend"],
        "n_params": n_params,
        "ddp_state_calculator_error": ddp_state_error, "activation_bytes_per_rank": activation,
        **{f"{s}_{k}_rank{r}": h[k] for s in STRATEGIES for r, h in enumerate(ranks[s])
           for k in ("param_bytes", "grad_bytes", "optimizer_bytes")},
        **{f"{s}_state_bytes_max_rank": state_bytes[s] for s in STRATEGIES},
        "optimizer_within_20pct": worst_split <= 0.2,
        "zero_step_time_ratio": step_ratio["zero"], "fsdp_step_time_ratio": step_ratio["fsdp"],
        **{f"{s}_comm_bytes_per_step": comm_bytes[s] for s in STRATEGIES},
        **{f"{s}_{op}_calls_per_step": n for s in STRATEGIES for op, n in calls[s].items()},
        "fsdp_units": units, "fsdp_root_params": root_params, "alpha_us": alpha * 1e6,
        "beta_GBps": beta / 1e9 if beta < float("inf") else "none: flat times",
        **{f"{s}_max_param_diff_f64": param_diff64[s] for s in ("zero", "fsdp")},
        **{f"{s}_max_param_diff_fp32": param_diff[s] for s in ("zero", "fsdp")},
        "f64_tolerance": f64_tolerance,
        "dcp_sharded_reload_max_diff": sharded_reload_diff,
        "dcp_single_process_max_diff": single_process_diff,
        **{f"max_params_80gib_16gpus_{s}": limits_80gb[s] for s in strategies},
        "fsdp_gpus_of_80gib_for_20b": gpus_for_20b,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
