"""Notebook 01, why is my second GPU idle: its claims and results record."""

from __future__ import annotations

from ..results import save_results
from . import closing

STEM = "01_why_is_my_second_gpu_idle"
MB = 2**20

REAL_DP = ("real DataParallel: cuda:0 peaked at {dev0:.0f} MB, {ratio:.2f}x the busiest other GPU "
           "({other:.0f} MB)")


def real_dp_skipped(held: list) -> dict:
    """Why section 1's real DataParallel did not run: ``claims.skip(REAL_DP, **...)``."""
    return dict(
        expect="real DataParallel would measure each GPU's peak memory, cuda:0's against the "
               "busiest other GPU's",
        why=f"GPUs {held} admit one process each (EXCLUSIVE_PROCESS compute mode): DataParallel "
            "in this kernel would hold them until it restarts, and the ranks launched below need "
            "them")


def claim_real_dp(claims, *, gpu: dict) -> None:
    """cuda:0's peak against the busiest other GPU's, where DataParallel had 2 GPUs or more."""
    if gpu["devices"] > 1:
        peak = gpu["peak"]
        claims.check(
            REAL_DP, "ratio > 1", dev0=peak[0] / MB, other=max(peak[1:]) / MB,
            ratio=peak[0] / max(peak[1:]),
            otherwise="cuda:0 peaked at {dev0:.0f} MB against {other:.0f} MB (likely, not measured "
                      "here: the replicas' own activations outweigh what DP gathers on cuda:0)")


def claim_rebuilt_grads(claims, *, grad_diff: float, grad_scale: float) -> None:
    claims.check(
        "rebuilt DP over 4 virtual devices computes one process's gradients: they differ by "
        "{grad_diff:.1e} at most, {relative:.0e} of the largest gradient: float64 rounding",
        "relative < 1e-10", grad_diff=grad_diff, relative=grad_diff / grad_scale,
        otherwise="they differ by {grad_diff:.1e}, more than float64 rounding: the "
                  "re-implementation does not compute what one process computes")


def claim_device0_excess(claims, *, peak_ratio: dict, ks: list) -> None:
    """Device 0's peak over the busiest other virtual device's, at every K > 1, and its trend."""
    multi = [K for K in ks if K > 1]
    ratios = [peak_ratio[K] for K in multi]
    claims.check(
        "device 0 holds more than every other virtual device at every K: {least:.2f}x the "
        "busiest other at least", "least > 1", least=min(ratios),
        otherwise="at some K another device held as much as device 0 ({least:.2f}x): the "
                  "replicas' activations outweigh what device 0 gathers at these sizes")
    claims.check(
        "device 0's excess grows with K: {first:.2f}x at K={k_first}, {last:.2f}x at "
        "K={k_last}", "growing == True",
        growing=ratios == sorted(ratios) and ratios[-1] > ratios[0],
        first=ratios[0], last=ratios[-1], k_first=multi[0], k_last=multi[-1],
        otherwise="the ratio did not grow at every step ({first:.2f}x at K={k_first}, "
                  "{last:.2f}x at K={k_last}): likely torch.chunk's uneven chunks (not measured "
                  "here)")


def claim_state_vs_outputs(claims, *, K: int, state_bytes: int, peak_bytes: int,
                           output_bytes: int, classes: int) -> None:
    claims.check(
        "at K={K}, weights, gradients and optimizer state make {state_mb:.1f} MB of device 0's "
        "{peak_mb:.1f} MB peak; the batch's outputs (gathered, their gradient, the loss's buffers) "
        "{out_mb:.1f} MB at most: for this model device 0 carries more model state than outputs",
        "state_mb > out_mb", K=K, state_mb=state_bytes / MB, peak_mb=peak_bytes / MB,
        out_mb=output_bytes / MB, classes=classes,
        otherwise="the outputs ({out_mb:.1f} MB) outweigh the model state ({state_mb:.1f} MB) on "
                  "device 0: {classes} outputs per sample, all gathered there")


def claim_serial_share(claims, *, serial_share: dict, kmax: int, load) -> None:
    """``load``: the dp_lab.OtherLoad measured during the ledger's runs."""
    claims.check(
        "the serial share of the step grows with K: {first:.0%} at K=1, {last:.0%} at K={kmax}",
        "last > first", first=serial_share[1], last=serial_share[kmax], kmax=kmax,
        **load.figures(),
        otherwise="the serial share was {first:.0%} at K=1 and {last:.0%} at K={kmax}: the "
                  "parallel phases slowed down more than replication and the reduction grew, "
                  "while other processes kept {others:.2f} of the {cores} cores busy (measured)")


def claim_gil(claims, *, gil: dict, load) -> None:
    """``load``: the dp_lab.OtherLoad measured during the race."""
    tiny = gil["many tiny ops"]
    claims.check(
        "on the tiny-op model 2 processes beat 2 threads: x{processes:.2f} against "
        "x{threads:.2f} (the GIL lets one thread run Python at a time)",
        "processes > threads", processes=tiny["processes"], threads=tiny["threads"],
        **load.figures(),
        otherwise="2 threads (x{threads:.2f}) did at least as well as 2 processes "
                  "(x{processes:.2f}) here, while other processes kept {others:.2f} of the "
                  "{cores} cores busy (measured)")


def claim_calculator(claims, *, calc_error: dict) -> None:
    claims.check(
        "consistency check: the calculator gives every virtual device's peak within {worst:.1%} "
        "of the ledger, at every K", "worst < 0.1", worst=max(calc_error.values()),
        otherwise="it missed by up to {worst:.1%}: the activations it assumes per sample "
                  "(2 × HIDDEN floats) are not what autograd saved here")


def claim_ddp_level(claims, *, tensor_balance: float, balance: float, what: str,
                    calc_error: float) -> None:
    """The DDP ranks' balance, and the calculator's DDP figure against the ranks' count."""
    claims.check(
        "the DDP ranks are level: their tensor bytes differ by a factor {tensor_balance:.3f} at "
        "most, their {what} by {balance:.2f}", "tensor_balance < 1.05 and balance < 1.25",
        tensor_balance=tensor_balance, balance=balance, what=what,
        otherwise="largest / smallest rank: {tensor_balance:.3f} in tensor bytes, {balance:.2f} in "
                  "{what} (likely, not measured here: rank 0 also writes the metrics, caches grow "
                  "unevenly)")
    claims.check(
        "the calculator's DDP figure matches the tensor bytes the ranks counted within "
        "{calc_error:.1%}", "calc_error < 0.1", calc_error=calc_error,
        otherwise="it missed the ranks' count by {calc_error:.1%}: what autograd saved per "
                  "sample is not the calculator's 2 × HIDDEN floats here")


def claim_dp_vs_ddp(claims, *, dp_mem: list, ddp_like: list, dp_predicted: list,
                    ddp_predicted: list) -> None:
    """DP's devices against the DDP ranks, measured alike, and the side the calculator predicts."""
    side = dict(dp0=dp_mem[0] / MB, ddp_max=max(ddp_like) / MB, ratio=dp_mem[0] / max(ddp_like),
                calc_ratio=dp_predicted[0] / max(ddp_predicted))
    side["same_side"] = (side["ratio"] > 1) == (side["calc_ratio"] > 1)
    why = ("DDP spares every device the outputs that DP gathers on device 0" if side["ratio"] > 1
           else "each DDP rank keeps a whole model state and its buckets a second copy of the "
                "gradients, more than the outputs DP piles onto device 0: DDP's gain here is "
                "balance, not a lower peak")
    claims.check(
        "every DDP rank holds more than DP's devices other than 0 ({ddp_min:.1f} MB against "
        "{dp_other:.1f} MB at most): DDP's balance costs a whole model state on every device",
        "ddp_min > dp_other", ddp_min=min(ddp_like) / MB, dp_other=max(dp_mem[1:]) / MB,
        otherwise="a DDP rank held {ddp_min:.1f} MB, DP's busiest other device {dp_other:.1f} "
                  "MB: at these sizes the replicas' activations outweigh the model state")
    claims.check(
        "DP's device 0 holds {ratio:.2f}x what the busiest DDP rank holds ({dp0:.1f} MB "
        "against {ddp_max:.1f} MB), on the side the calculator predicts ({calc_ratio:.2f}x): "
        + why, "same_side == True", **side,
        otherwise="the calculator predicted {calc_ratio:.2f}x, the run measured {ratio:.2f}x "
                  "(likely, not measured here: allocator blocks and workspaces the calculator "
                  "does not count)")


def save(setup, claims, tasks, *, grad_diff, grad_scale, ks, ledgers, peak_ratio, serial_share,
         calc_error, calc_ratio, gil, gpu, n, what, ddp_mem, ddp_balance, ddp_tensor_mem,
         ddp_tensor_balance, calc_error_ddp, state_bytes, output_bytes, trend) -> None:
    """The results record: the figures of every section, per K where they vary with K."""
    figures = {
        "rebuilt_grad_max_diff": grad_diff, "rebuilt_grad_max_abs": grad_scale,  # float64
        "ks": ",".join(map(str, ks)),
        "calc_max_error": max(calc_error.values()),
        "calc_within_10pct": max(calc_error.values()) < 0.10,
        **{f"gil_{how}_{short}": gil[name][how]
           for name, short in [("few large matmuls", "matmul"), ("many tiny ops", "tiny")]
           for how in ("threads", "processes")},
        "gpu_measured": gpu["measured"],
        "ddp_world_size": n, "ddp_memory_kind": what, "ddp_balance_max_over_min": ddp_balance,
        "ddp_rank0_mem_bytes": ddp_mem[0],
        "ddp_tensor_balance_max_over_min": ddp_tensor_balance,
        "ddp_rank0_tensor_bytes": ddp_tensor_mem[0],
        "ddp_calc_error": calc_error_ddp, "ledger_dev0_state_bytes_kmax": state_bytes,
        "ledger_dev0_output_bytes_kmax": output_bytes, "memory_trend": " ".join(trend),
    }
    for K in ks:
        peaks = ledgers[K].peaks()
        figures.update({f"ledger_dev0_bytes_k{K}": peaks[0], f"serial_share_k{K}": serial_share[K],
                        f"calc_error_k{K}": calc_error[K]})
        if K > 1:
            figures.update({f"ledger_max_other_bytes_k{K}": max(peaks[1:]),
                            f"ledger_ratio_k{K}": peak_ratio[K], f"calc_ratio_k{K}": calc_ratio[K]})
    if gpu["measured"]:
        figures.update({f"gpu_peak_bytes_dev{d}": peak for d, peak in enumerate(gpu["peak"])},
                       gpu_calc_error_dev0=gpu["error"][0])
    save_results(STEM, figures, setup, claims=claims, tasks=tasks)


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
