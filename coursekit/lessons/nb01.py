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


def trend_why(first: list, last: list, kmax: int) -> str:
    """The prediction's answer: devices 0 and 1's peaks (``first`` at K=2, ``last`` at kmax)."""
    return (f"device 0 held {first[0] / MB:.1f} MB at K=2 and {last[0] / MB:.1f} MB at K={kmax}, "
            f"device 1 {first[1] / MB:.1f} and {last[1] / MB:.1f} MB. At any K device 0 keeps the "
            "whole model state and the whole batch's outputs; device 1 a replica and its 1/K share "
            "of the batch")


STATE = ("weights", "optimizer state", "gradients", "received gradients")
OUTPUTS = ("gathered outputs", "loss buffers", "output grads", "outputs")


def state_and_outputs(ledger) -> tuple[int, int]:
    """Device 0's model state at its peak (weights, optimizer state, gradients, a replica's in
    transit), and the most bytes of outputs it held in any phase (gathered, their gradient, the
    loss's buffers, its own replica's)."""
    state = sum(ledger.at_peak(0).get(what, 0) for what in STATE)
    outputs = max(sum((ledger.breakdown[ph][0] or {}).get(what, 0) for what in OUTPUTS)
                  for ph in ledger.phases)
    return state, outputs


def plot_gil(gil: dict) -> None:
    """The race's speed-ups over one thread: 2 threads and 2 processes, per model."""
    from nb01 import dp_lab  # launchers/nb01/, importable after configure

    dp_lab.plot_pairs({f"2 {how}": [gil[name][how] for name in gil]
                       for how in ("threads", "processes")},
                      list(gil), "the same forward work on 2 threads vs 2 processes",
                      "speed-up over one thread", xlabel="model", line=(2, "ideal (2 cores)"))


def plot_gpu_calculator(gpu: dict, predicted: list) -> None:
    """Section 1's measured peaks against the calculator's ``predicted`` bytes, per GPU; keeps
    each GPU's relative error in ``gpu["error"]`` (for the results record)."""
    from nb01 import dp_lab

    gpu["error"] = [abs(p - m) / m for p, m in zip(predicted, gpu["peak"], strict=True)]
    dp_lab.plot_pairs({"measured peak": [p / MB for p in gpu["peak"]],
                       "calculator": [p / MB for p in predicted]},
                      [f"cuda:{d}" for d in range(gpu["devices"])],
                      "real DataParallel: measured vs calculator", "MB")


def plot_dp_vs_ddp(dp_mem: list, ddp_tensors: list, ddp_predicted: list, ddp_mem: list, what: str,
                   *, on_gpus: bool, ledger) -> None:
    """DP's devices (``dp_mem``: real DP's allocator peaks on GPUs, beside DDP's; else the
    ``ledger``'s, by kind), each DDP rank's tensor bytes by kind with the calculator's, and
    ``what`` the memory system saw of each rank (``ddp_mem``)."""
    from nb01 import dp_lab

    kinds = None
    if on_gpus:  # the allocator's peaks of real DP and DDP, on the same GPUs
        side, title = {"real DataParallel": dp_mem, "DDP": ddp_mem}, "peak GPU memory allocated"
    else:
        side = {"rebuilt DP (ledger)": dp_mem}
        kinds = [ledger.at_peak(k) for k in range(len(dp_mem))]
        title = f"rebuilt DP, {len(ddp_tensors)} virtual devices: tensor bytes at each peak"
    dp_lab.plot_dp_vs_ddp(side, title, ddp_tensors, ddp_predicted, ddp_mem, what,
                          same_scale=not on_gpus, dp_kinds=kinds)


def memory_explorer() -> None:
    """The calculator's peaks per device, DataParallel against DDP, for a model described by
    sliders: drawn once at the default (kept in the executed copy), redrawn in a live notebook."""
    import ipywidgets as widgets
    from common import memory
    from IPython.display import display
    from nb01 import dp_lab

    default = dict(params_millions=350, batch=64, devices=4, activation_mb=120,
                   output_size=512 * 32000, dtype="float32", optimizer="adam")
    dp_lab.draw_memory(**default)
    display(widgets.interactive(
        dp_lab.draw_memory,
        params_millions=widgets.FloatSlider(value=350, min=1, max=3000, step=1,
                                            description="params (M)"),
        batch=widgets.IntSlider(value=64, min=1, max=512, description="global batch"),
        devices=widgets.IntSlider(value=4, min=1, max=8, description="devices"),
        activation_mb=widgets.FloatSlider(value=120, min=0, max=1000, step=1,
                                          description="act. MB/sample"),
        output_size=widgets.IntSlider(value=512 * 32000, min=1, max=2**25, step=1000,
                                      description="outputs/sample"),
        dtype=widgets.Dropdown(options=list(memory.DTYPE_BYTES), value="float32",
                               description="dtype"),
        optimizer=widgets.Dropdown(options=list(memory.OPTIMIZER_STATES), value="adam",
                                   description="optimizer"),
    ))


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


STEP_TIME = ("the step took {fit_ms:.0f} ms at K={k_fit} and {last_ms:.0f} ms at K={kmax}: past "
             "this machine's {cores} cores, the virtual devices' threads take turns on them")


def claim_serial_share(claims, *, serial_share: dict, kmax: int, load, timings: dict) -> None:
    """``load``: the dp_lab.OtherLoad measured during the ledger's runs; ``timings``: seconds
    per phase, per K. Also the step's time past the machine's cores (K threads > cores)."""
    claims.check(
        "the serial share of the step grows with K: {first:.0%} at K=1, {last:.0%} at K={kmax}",
        "last > first", first=serial_share[1], last=serial_share[kmax], kmax=kmax,
        **load.figures(),
        otherwise="the serial share was {first:.0%} at K=1 and {last:.0%} at K={kmax}: the "
                  "parallel phases slowed down more than replication and the reduction grew, "
                  "while other processes kept {others:.2f} of the {cores} cores busy (measured)")
    cores = load.figures()["cores"]
    if kmax <= cores:
        claims.skip(STEP_TIME, why=f"this machine has {cores} cores, one per virtual device or "
                    "more: no thread waited for a core", expect="past the machine's cores the "
                    "step slows: the virtual devices' threads take turns on them", cores=cores)
    else:
        k_fit = max(k for k in timings if k <= cores)
        step_ms = {k: 1000 * sum(t.values()) for k, t in timings.items()}
        claims.check(STEP_TIME, "last_ms > fit_ms", fit_ms=step_ms[k_fit], k_fit=k_fit,
                     last_ms=step_ms[kmax], kmax=kmax, **load.figures(),
                     otherwise="the step took {fit_ms:.0f} ms at K={k_fit} and {last_ms:.0f} ms "
                               "at K={kmax}, on {cores} cores: it did not slow past the cores "
                               "here, while other processes kept {others:.2f} of them busy "
                               "(measured)")


def claim_gil(claims, *, gil: dict, load) -> None:
    """``load``: the dp_lab.OtherLoad measured during the race. Taking turns on the GIL alone
    would give 2 threads one thread's speed (x1); below x1 they lose time handing it over."""
    tiny = gil["many tiny ops"]
    why = ("slower than one thread: taking turns would give x1, and they lose more handing the "
           "GIL over, which torch releases and retakes around every op" if tiny["threads"] < 1
           else "the threads take turns on the GIL for the Python between torch's ops")
    claims.check(
        "on the tiny-op model 2 processes beat 2 threads: x{processes:.2f} against "
        "x{threads:.2f}, " + why,
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


def balance(per_rank: list) -> float:
    """The largest rank's figure over the smallest's."""
    return max(per_rank) / min(per_rank)


def claim_ddp_level(claims, *, tensor_mem: list, mem: list, what: str, calc_error: float) -> None:
    """The DDP ranks' balance (``tensor_mem``: their tensor bytes, ``mem``: ``what`` the memory
    system saw), and the calculator's DDP figure against the ranks' count."""
    claims.check(
        "the DDP ranks are level: their tensor bytes differ by a factor {tensor_balance:.3f} at "
        "most, their {what} by {balance:.2f}", "tensor_balance < 1.05 and balance < 1.25",
        tensor_balance=balance(tensor_mem), balance=balance(mem), what=what,
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
         calc_error, calc_ratio, gil, gpu, n, what, ddp_mem, ddp_tensor_mem, calc_error_ddp,
         state_bytes, output_bytes, trend) -> None:
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
        "ddp_world_size": n, "ddp_memory_kind": what, "ddp_balance_max_over_min": balance(ddp_mem),
        "ddp_rank0_mem_bytes": ddp_mem[0],
        "ddp_tensor_balance_max_over_min": balance(ddp_tensor_mem),
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
