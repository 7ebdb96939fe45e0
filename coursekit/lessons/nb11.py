"""Notebook 11, beyond DDP (sharding): its claims, launcher import and results record."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..results import save_results
from . import closing

STEM = "11_beyond_ddp_sharding"
MiB = 2**20
STRATEGIES = ("ddp", "zero", "fsdp")  # the ones the notebook runs


def load_launcher(path):
    """Import a launcher as a module (its main() only runs under torchrun)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def claim_communication(claims, *, comm: dict, comm_bytes: dict, comm_time: dict, step_s: dict,
                        step_times: dict, labels: dict) -> None:  # fmt: skip
    """FSDP2's bytes against DDP's (the ring formulas), and each sharded step's time against
    DDP's (measured), with the share of it the alpha-beta model explains."""
    claims.check(
        "By the ring formulas FSDP2 sends {fsdp_over_ddp:.3f}x DDP's bytes per step, in {calls} "
        "collective calls",
        "fsdp_over_ddp > 1 and fsdp_over_ddp < 1.5",
        fsdp_over_ddp=comm_bytes["fsdp"] / comm_bytes["ddp"],
        calls=sum(n for _, n in comm["fsdp"].values()),
        otherwise="FSDP2 sends {fsdp_over_ddp:.3f}x DDP's bytes here: with one unit only (the "
                  "root) nothing is gathered twice")  # fmt: skip
    for s in ("zero", "fsdp"):
        extra_ms = (comm_time[s] - comm_time["ddp"]) * 1e3
        diff_ms = (step_s[s] - step_s["ddp"]) * 1e3
        claims.compare(
            f"{labels[s]}'s step took longer than DDP's: {{ratio:.2f}}x (quartiles "
            "{ratio_low:.2f}x to {ratio_high:.2f}x); the alpha-beta model's extra communication "
            "({extra_ms:.1f} ms) is {share:.0%} of the {diff_ms:.1f} ms measured",
            less=step_times["ddp"], more=step_times[s], paired=False, extra_ms=extra_ms,
            diff_ms=diff_ms, share=extra_ms / diff_ms if diff_ms > 0 else 0.0,
            otherwise=f"{labels[s]}'s step took {{ratio:.2f}}x DDP's here (quartiles "
                      "{ratio_low:.2f}x to {ratio_high:.2f}x): shorter, though the alpha-beta "
                      "model gives it {extra_ms:.1f} ms more communication per step",
            tie=f"{labels[s]}'s and DDP's steps took the same time here: {{ratio:.2f}}x, inside "
                "their spread ({ratio_low:.2f}x to {ratio_high:.2f}x); the model's extra "
                "communication is {extra_ms:.1f} ms")  # fmt: skip


def claim_limits(claims, *, limits: dict, strategies) -> None:
    """The calculator's largest model on 8 GPUs of 80 GiB, growing with each stage."""
    claims.check(
        "On 8 GPUs of 80 GiB with 10 GiB of activations the calculator's limit grows with each "
        "stage: DDP {ddp:.1f}, ZeRO-1 {zero:.1f}, ZeRO-2 {zero2:.1f}, FSDP2 {fsdp:.1f} billion "
        "parameters",
        "ddp < zero and zero < zero2 and zero2 < fsdp",
        **{s: limits[s] / 1e9 for s in strategies},
        otherwise="the calculator's limits (DDP {ddp:.1f}, ZeRO-1 {zero:.1f}, ZeRO-2 "
                  "{zero2:.1f}, FSDP2 {fsdp:.1f} billion) do not grow at every stage: FSDP2's "
                  "gathered unit outweighs what ZeRO-3 divides")  # fmt: skip


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
         worst_split, step_ratio, comm_bytes, units, root_params, alpha, beta, param_diff64,
         param_diff, fp32_vs_fp64, f64_tolerance, sharded_reload_diff, single_process_diff,
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
        "fsdp_units": units, "fsdp_root_params": root_params, "alpha_us": alpha * 1e6,
        "beta_GBps": beta / 1e9 if beta < float("inf") else "none: flat times",
        **{f"{s}_max_param_diff_f64": param_diff64[s] for s in ("zero", "fsdp")},
        **{f"{s}_max_param_diff_fp32": param_diff[s] for s in ("zero", "fsdp")},
        "fp32_vs_f64_max_diff": max(fp32_vs_fp64.values()), "f64_tolerance": f64_tolerance,
        "dcp_sharded_reload_max_diff": sharded_reload_diff,
        "dcp_single_process_max_diff": single_process_diff,
        **{f"max_params_80gib_8gpus_{s}": limits_80gb[s] for s in strategies},
        "fsdp_gpus_of_80gib_for_20b": gpus_for_20b,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
