"""Notebook 01's bookkeeping and pictures: the ledger, real DP's sampler, the plots.

Not a launcher: a module that notebook 01 imports (from launchers/nb01/). What the notebook
teaches (DataParallel's step re-implemented, the measurements, the claims) stays in the
notebook; this file holds the accounting and the drawing that would bury it (nb01/
tensor_bytes.py counts what autograd saves, for the ledger and the DDP launcher alike).
"""

import ast
import inspect
import textwrap
import threading
import time
from contextlib import contextmanager

import matplotlib.pyplot as plt
import numpy as np
import psutil
import torch

MB = 2**20
# one colour per kind of bytes, in every figure (the ledger's and the DDP ranks'): model state in
# blues, greens and oranges, the batch in greys, what the forward makes in purples and reds
KIND_COLORS = {
    "weights": "tab:blue", "gradients": "tab:orange", "received gradients": "#ffbb78",
    "DDP buckets": "#a05a00", "optimizer state": "tab:green", "batch": "tab:gray",
    "input": "#c7c7c7", "activations": "tab:purple", "outputs": "tab:red",
    "gathered outputs": "#8c0000", "output grads": "tab:pink", "loss buffers": "#f7b6d2",
}

SERIES_COLORS = ("black", "tab:olive")  # DataParallel and DDP side by side: no kind's colour


def stack_by_kind(ax, labels, per_bar):
    """Bars stacked by kind (``per_bar``: one {kind: bytes} per label), in KIND_COLORS' order
    and colours; the legend outside, on the right."""
    bottom = np.zeros(len(labels))
    for kind, color in KIND_COLORS.items():
        values = np.array([d.get(kind, 0) / MB for d in per_bar])
        if values.any():
            ax.bar(labels, values, bottom=bottom, label=kind, color=color)
            bottom += values
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return bottom


def show_source(obj, first_lines=None, until=None, doc=True):
    """Display the source of ``obj`` from the installed torch: its first lines only, or up to
    the first line that holds ``until``, if asked; without its docstring if ``doc`` is False."""
    from IPython.display import Markdown, display

    lines = inspect.getsource(obj).splitlines()
    if not doc:  # the docstring: the first statement of the body, if it is a string
        body = ast.parse(textwrap.dedent("\n".join(lines))).body[0].body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            del lines[body[0].lineno - 1:body[0].end_lineno]
    if until is not None:
        first_lines = next(i + 1 for i, line in enumerate(lines) if until in line)
    shown = lines if first_lines is None else lines[:first_lines] + ["    ..."]
    where = inspect.getsourcefile(obj).split("site-packages/")[-1]
    display(Markdown(f"`{where}`\n```python\n" + "\n".join(shown) + "\n```"))


class Ledger:
    """Bytes held per virtual device and phase, seconds per phase (for the re-implementation)."""

    def __init__(self, devices):
        self.held = [{} for _ in range(devices)]  # device -> {what: bytes}
        self.phases, self.breakdown, self.seconds = {}, {}, {}
        self.current = None

    def hold(self, device, what, *items):
        """Device `device` now also holds these tensors (or byte counts)."""
        nbytes = sum(i if isinstance(i, int) else i.nbytes for i in items)
        self.held[device][what] = self.held[device].get(what, 0) + nbytes
        self._record(device)

    def drop(self, device, *whats):
        for what in whats or list(self.held[device]):
            self.held[device].pop(what, None)
        self._record(device)

    def _record(self, device):  # keep each device's largest total within the phase
        total = sum(self.held[device].values())
        peaks = self.phases[self.current]
        if total > peaks[device]:
            peaks[device] = total
            self.breakdown[self.current][device] = dict(self.held[device])

    @contextmanager
    def phase(self, name):
        self.current = name
        self.phases[name] = [-1] * len(self.held)
        self.breakdown[name] = [None] * len(self.held)
        start = time.perf_counter()
        yield
        self.seconds[name] = time.perf_counter() - start
        for device in range(len(self.held)):
            self._record(device)

    def peaks(self):
        return [max(p[k] for p in self.phases.values()) for k in range(len(self.held))]

    def at_peak(self, device):
        """{what: bytes} that ``device`` held at its own peak."""
        phase = max(self.phases, key=lambda ph: self.phases[ph][device])
        return self.breakdown[phase][device] or {}


class OtherLoad:
    """The CPU that other processes used while the block ran, in cores (1.0: one core's
    worth): the system's busy time less this process's and its children's."""

    def __enter__(self):
        self.start = self._times()
        return self

    def __exit__(self, *exc):
        (busy0, ours0, t0), (busy1, ours1, t1) = self.start, self._times()
        self.cores = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (t1 - t0)

    @staticmethod
    def _times():
        cpu, me = psutil.cpu_times(), psutil.Process()
        busy = sum(getattr(cpu, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
        ours = 0.0
        for p in [me, *me.children(recursive=True)]:
            try:
                ours += sum(p.cpu_times()[:2])  # user + system
            except psutil.NoSuchProcess:
                pass
        return busy, ours, time.perf_counter()

    def figures(self):
        """For a claim: ``others`` (cores other processes kept busy) and ``cores``."""
        return {"others": self.cores, "cores": psutil.cpu_count()}


def exclusive_gpus(n_gpus):
    """The visible GPUs whose compute mode admits one process (EXCLUSIVE_PROCESS, read through
    NVML as torch.cuda.utilization reads it): a kernel that used them holds them until it
    restarts, and ranks launched later get "busy or unavailable". [] where NVML cannot say."""
    try:
        import pynvml

        return [d for d in range(n_gpus) if pynvml.nvmlDeviceGetComputeMode(
            torch.cuda._get_pynvml_handler(d)) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS]
    except Exception:  # no nvidia-ml-py, no driver, or another torch's helpers
        return []


def measure_real_dp(train_step, seconds):
    """Run ``train_step`` (a DataParallel step) for ``seconds``, sampling every GPU meanwhile:
    what nvidia-smi shows (NVML, through torch.cuda.device_memory_used / utilization) and what
    PyTorch's allocator hands to tensors. Draws it; returns the peaks per GPU."""
    devices = list(range(torch.cuda.device_count()))
    for d in devices:
        torch.cuda.reset_peak_memory_stats(d)
    samples, stop, t0 = [], threading.Event(), time.perf_counter()

    def sample_gpus():
        while not stop.is_set():
            row = {"t": time.perf_counter() - t0}
            for d in devices:
                row[f"mem{d}"] = torch.cuda.memory_allocated(d)  # tensors, by PyTorch's count
                try:  # the driver's figures, through NVML: what nvidia-smi prints
                    row[f"used{d}"] = torch.cuda.device_memory_used(d)
                    row[f"util{d}"] = torch.cuda.utilization(d)
                except Exception:  # NVML not readable here: no driver figures, said below
                    row[f"used{d}"] = row[f"util{d}"] = float("nan")
            samples.append(row)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample_gpus, daemon=True)
    sampler.start()
    steps = 0
    while steps < 3 or time.perf_counter() - t0 < seconds:
        train_step()
        steps += 1
    torch.cuda.synchronize()
    stop.set()
    sampler.join()
    gpu = {"measured": True, "devices": len(devices), "steps": steps,
           "peak": [torch.cuda.max_memory_allocated(d) for d in devices],
           "reserved": [torch.cuda.memory_reserved(d) for d in devices]}  # fmt: skip

    fig, (bars, mem, util) = plt.subplots(1, 3, figsize=(14, 3.6))
    names = [f"cuda:{d}" for d in devices]
    bars.bar(names, [p / MB for p in gpu["peak"]], color="tab:red", label="peak allocated")
    bars.bar(names, [r / MB for r in gpu["reserved"]], fill=False, label="reserved (cache)")
    bars.set(xlabel="GPU", ylabel="MB", title="peak memory per GPU (measured)")
    bars.legend(fontsize="small", loc="lower right")
    ts = [s["t"] for s in samples]
    for d in devices:
        color = plt.cm.tab10(d % 10)
        mem.plot(ts, [s[f"used{d}"] / MB for s in samples], color=color,
                 label=f"cuda:{d} used (nvidia-smi)")
        mem.plot(ts, [s[f"mem{d}"] / MB for s in samples], ls="--", color=color,
                 label=f"cuda:{d} allocated to tensors")
        util.plot(ts, [s[f"util{d}"] for s in samples], color=color, label=f"cuda:{d}")
    mem.set(xlabel="seconds", ylabel="MB", title="memory over the run", ylim=(0, None))
    util.set(xlabel="seconds", ylabel="% of time busy", title="utilisation (NVML)", ylim=(0, 105))
    mem.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    util.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    plt.show()
    if all(s[f"util{d}"] != s[f"util{d}"] for s in samples for d in devices):  # all NaN
        print("NVML could not be read here (nvidia-ml-py missing or not permitted): the "
              "utilisation plot is empty, the memory plot shows only PyTorch's own count.")
    return gpu


def plot_ledger(ledgers, ks):
    """Left: what each virtual device holds at its peak, for the largest K. Right: how the
    peaks change with K: device 0's and the busiest other device's, from 0 MB."""
    kmax = max(ks)
    ledger = ledgers[kmax]
    at_peak = [ledger.at_peak(k) for k in range(kmax)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 3.8))
    stack_by_kind(left, [f"vdev {k}" for k in range(kmax)], at_peak)
    left.set(xlabel="virtual device", ylabel="MB at that device's peak",
             title=f"rebuilt DP (re-implementation), K={kmax}: bytes per virtual device")
    multi = [k for k in ks if k > 1]
    dev0 = [ledgers[k].peaks()[0] / MB for k in multi]
    others = [max(ledgers[k].peaks()[1:]) / MB for k in multi]
    right.plot(multi, dev0, "o-", color="tab:red", label="device 0")
    right.plot(multi, others, "s-", color="tab:blue", label="busiest other device")
    for k, a, b in zip(multi, dev0, others, strict=True):
        right.annotate(f"{a / b:.2f}x", (k, a), textcoords="offset points", xytext=(0, 6),
                       ha="center", fontsize=8)
    right.set(xlabel="virtual devices K", ylabel="peak MB (ledger)", ylim=(0, 1.15 * max(dev0)),
              xticks=multi, title="peaks against K (ledger): device 0 and the busiest other device")
    right.legend(fontsize=9, loc="lower left")
    fig.tight_layout()
    plt.show()


def plot_phase_times(timings, ks, serial):
    """Left: ms per phase and K, one colour per phase (serial phases hatched). Right: the
    serial phases' share of the step."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 3.8))
    phases = list(timings[ks[0]])
    bottom = np.zeros(len(ks))
    for i, ph in enumerate(phases):
        values = np.array([timings[k][ph] * 1000 for k in ks])
        left.bar([str(k) for k in ks], values, bottom=bottom, color=plt.cm.tab10(i % 10),
                 hatch="//" if ph in serial else None, edgecolor="white",
                 label=ph + (" (serial, device 0)" if ph in serial else " (parallel)"))
        bottom += values
    left.set(xlabel="virtual devices K", ylabel="ms per step (best of the steps)",
             title="rebuilt DP: time per phase")
    left.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    share = [100 * sum(timings[k][ph] for ph in serial) / sum(timings[k].values()) for k in ks]
    right.plot(ks, share, "o-", color="tab:red")
    right.set(xlabel="virtual devices K", ylabel="% of the step", ylim=(0, 100), xticks=ks,
              title="share of the step in serial phases on device 0")
    fig.tight_layout()
    plt.show()


def plot_calculator(ledger, predicted, k):
    """Phase by phase, device 0 and device 1: the ledger's bytes and the calculator's."""
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for device, color in [(0, "tab:red"), (1, "tab:blue")]:
        ax.plot(list(ledger.phases), [v[device] / MB for v in ledger.phases.values()], "o-",
                color=color, label=f"vdev {device}: ledger")
        ax.plot(list(predicted), [v[device] / MB for v in predicted.values()], "x--", color=color,
                label=f"vdev {device}: calculator")
    ax.set(xlabel="phase of the step", ylabel="MB held", ylim=(0, None),
           title=f"phase by phase, K={k}: ledger (re-implementation) vs calculator")
    ax.tick_params(axis="x", labelrotation=30)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    plt.show()


def plot_pairs(groups, labels, title, ylabel, xlabel="device", colors=("tab:red", "tab:blue"),
               line=None):
    """Bars side by side: ``groups`` = {series name: [value per label]}; ``line``: (y, label)."""
    fig, ax = plt.subplots(figsize=(8, 3.4))
    width = 0.8 / len(groups)
    for i, (name, values) in enumerate(groups.items()):
        ax.bar([j + (i - (len(groups) - 1) / 2) * width for j in range(len(labels))], values, width,
               label=name, color=colors[i % len(colors)])
    if line is not None:
        ax.axhline(line[0], ls="--", color="gray", lw=1, label=line[1])
    ax.set_xticks(range(len(labels)), labels)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    plt.show()


def draw_memory(params_millions, batch, devices, activation_mb, output_size, dtype, optimizer):
    """The calculator's peaks per device, DataParallel against DDP (GiB)."""
    from common import memory

    sizes = dict(dtype=dtype, optimizer=optimizer, activation_bytes_per_sample=activation_mb * MB,
                 output_size=output_size)
    dp_bytes = memory.dp_memory(params_millions * 1e6, batch, devices, **sizes)
    ddp_bytes = memory.ddp_memory(params_millions * 1e6, batch, devices, **sizes)
    plot_pairs({"DataParallel": [b / 2**30 for b in dp_bytes],
                "DDP": [b / 2**30 for b in ddp_bytes]},
               [f"device {k}" for k in range(devices)], ylabel="GiB at peak (calculator)",
               title=f"{params_millions:g} M parameters, global batch {batch}, {devices} devices",
               colors=SERIES_COLORS)


def plot_dp_vs_ddp(dp_bytes, dp_title, ddp_tensors, ddp_predicted, ddp_memory, what, same_scale,
                   dp_kinds=None):
    """Left: DP's devices (by kind where ``dp_kinds`` gives {kind: bytes} per device).
    Middle: each DDP rank's tensor bytes by kind, and the calculator.
    Right: what the memory system saw of each DDP rank (not a tensor count: its own scale)."""
    n = len(ddp_tensors)
    x = np.arange(n)
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(15, 3.8))
    if dp_kinds is not None:  # the ledger's devices, by kind, as the DDP ranks beside them
        stack_by_kind(left, x, dp_kinds)
        left.get_legend().remove()  # one legend for both, on the middle's right
    for series, (name, values) in enumerate(dp_bytes.items() if dp_kinds is None else []):
        shift = 0 if len(dp_bytes) == 1 else (series - 0.5) * 0.4
        left.bar(x + shift, [v / MB for v in values], 0.8 / len(dp_bytes), label=name,
                 color=SERIES_COLORS[series])
        left.legend(fontsize=9, loc="best")
    left.set(xlabel="device", ylabel="MB", title=dp_title)
    bottom = stack_by_kind(mid, x, ddp_tensors)
    mid.plot(x, [p / MB for p in ddp_predicted], "kx", ms=10, label="calculator")
    shown = {}  # every kind of both panels, in KIND_COLORS' order, then the calculator's mark
    for ax in (left, mid) if dp_kinds is not None else (mid,):
        shown.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    order = [k for k in KIND_COLORS if k in shown] + ["calculator"]
    mid.legend([shown[k] for k in order], order, fontsize=9, loc="upper left",
               bbox_to_anchor=(1.0, 1.0))
    mid.set(xlabel="DDP rank", ylabel="tensor MB", title=f"DDP, {n} ranks: tensor bytes per rank")
    if same_scale:  # tensor bytes on both: one scale
        top = 1.1 * max(max(max(v) for v in dp_bytes.values()), max(bottom * MB)) / MB
        left.set_ylim(0, top)
        mid.set_ylim(0, top)
    right.bar(x, [m / MB for m in ddp_memory], color=SERIES_COLORS[1])
    right.set(xlabel="DDP rank", ylabel="MB", title=f"DDP: {what} (not a tensor count)")
    for ax in (left, mid, right):
        ax.set_xticks(x, [str(k) for k in x])
    fig.tight_layout()
    plt.show()
