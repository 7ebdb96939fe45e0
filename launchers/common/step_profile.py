"""One DDP step under torch.profiler, drawn as a timeline, with its overlap measured
(notebooks 06 and 07): the machinery behind their timeline figures, not their lesson.

`profiled_steps` runs single steps under the profiler; `profile_events` turns torch.profiler's
events into the timeline's rows (CPU ranges on their threads; on a GPU also every kernel on
its stream, in device time); `overlap` is the share of the all-reduce time inside backward;
`profiled_part` is notebook 06's profile part (the median step's events and chrome trace).
"""

import os
import sys
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.autograd import DeviceType

from common.bench_rounds import sync

DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset", None}  # kineto's kinds of GPU work (not
# "gpu_user_annotation": a record_function's range mirrored onto the GPU's timeline)


def cpu_kind(name):
    """What a CPU range of torch.profiler is, for the timeline (None: not drawn)."""
    return ("all-reduce" if "all_reduce" in name or "allreduce" in name else
            "backward" if name.startswith("autograd::engine::evaluate_function") else
            "forward" if name in ("step_forward", "DistributedDataParallel.forward") else
            "wait" if name == "step_wait" else
            "optimizer" if name.startswith("Optimizer.step") else
            "step" if name == "ddp_step" else None)


def is_nccl_all_reduce(name):
    """NCCL's all-reduce kernels, whatever the case: ncclDevKernel_AllReduce_Sum_f32_RING_LL
    (NCCL 2.19 and later), ncclKernel_AllReduce_RING_LL_Sum_float (before)."""
    n = name.lower().replace("_", "")
    return "nccl" in n and "kernel" in n and "allreduce" in n


def profile_events(raw):
    """torch.profiler's events (FunctionEvent: name, device_type, time_range, ...) -> the
    timeline's: CPU ranges on their threads; on a GPU also every kernel on its stream, in
    device time, as NCCL's all-reduce, "backward" (launched by an op that ran inside backward
    on the CPU: linked to it by correlation id) or "kernel" (the others)."""
    raw = list(raw)
    cpu = [e for e in raw if e.device_type == DeviceType.CPU]
    events = [{"kind": cpu_kind(e.name), "name": e.name, "device": "cpu",
               "row": f"thread {e.thread}", "start_us": e.time_range.start,
               "end_us": e.time_range.end} for e in cpu if cpu_kind(e.name)]
    bw = [(e["start_us"], e["end_us"]) for e in events if e["kind"] == "backward"]
    launched = {e.id: e.time_range.start for e in cpu}  # a CPU op's correlation id: its start
    for e in raw:
        if e.device_type != DeviceType.CUDA or getattr(e, "activity_type", None) not in DEVICE_WORK:
            continue
        link = getattr(e, "linked_correlation_id", 0)  # 0: linked to no CPU op
        at = launched.get(link) if link else None
        kind = ("all-reduce" if is_nccl_all_reduce(e.name) else
                "backward" if at is not None and any(s <= at <= t for s, t in bw) else "kernel")
        events.append({"kind": kind, "name": e.name, "device": "cuda",
                       "row": f"cuda:{e.device_index} stream {e.device_resource_id}",
                       "start_us": e.time_range.start, "end_us": e.time_range.end})
    return events


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(events):
    """(share of the all-reduce time inside backward, what was timed). With NCCL: device time,
    its all-reduce kernels on the GPU inside the span of the kernels backward launched (the CPU
    only launches them: its ranges do not say when the GPU ran them). With gloo: its own
    threads do the work on the CPU (gloo:all_reduce), inside backward's CPU ranges; without
    such events, the launches (c10d::allreduce_)."""
    gpu = [e for e in events if e["device"] != "cpu"]
    comm = [e for e in gpu if e["kind"] == "all-reduce"]
    if comm:
        inside = [e for e in gpu if e["kind"] == "backward"]
        basis = "device time of NCCL's all-reduce kernels, inside the kernels backward launched"
        if not inside:
            inside = [e for e in gpu if e["kind"] == "kernel"]
            basis = "device time of NCCL's all-reduce kernels, inside the span of the other kernels"
    else:
        cpu = [e for e in events if e["device"] == "cpu"]
        inside = [e for e in cpu if e["kind"] == "backward"]
        comm = [e for e in cpu if e["kind"] == "all-reduce" and not e["name"].startswith("c10d::")]
        basis = "CPU time of the communication library's own threads (gloo), inside backward"
        if not comm:
            comm = [e for e in cpu if e["kind"] == "all-reduce"]
            basis = "CPU time of the all-reduce launches (no worker events), inside backward"
    ar = union([(e["start_us"], e["end_us"]) for e in comm])
    if not ar or not inside:
        return 0.0, basis
    lo, hi = min(e["start_us"] for e in inside), max(e["end_us"] for e in inside)
    total = sum(e - s for s, e in ar)
    within = sum(max(0, min(e, hi) - max(s, lo)) for s, e in ar)
    return (within / total if total else 0.0), basis


@contextmanager
def kineto_quiet():
    """Kineto prints two USDT lines to stderr per profile, whatever KINETO_LOG_LEVEL says."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profiled_steps(step, device, repeats, group=None, keep=True):
    """`repeats` single steps, each under torch.profiler (on a GPU with its CUDA activity:
    kernels in device time), every rank starting together (a barrier in `group`). Where
    `keep`: (share of the all-reduce time inside backward, what was timed, the timeline's
    events, the profile) of each step, sorted by the share: the median step is the middle one
    (one step alone is noisy: a backend thread's time includes its wait for the other ranks).
    Elsewhere None."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    steps = []
    for _ in range(repeats):
        sync(device)
        dist.barrier(group=group)
        with kineto_quiet(), torch.profiler.profile(activities=activities) as prof:
            with torch.profiler.record_function("ddp_step"):
                step()
                sync(device)
        if keep:
            events = profile_events(prof.events())
            steps.append((*overlap(events), events, prof))
    return sorted(steps, key=lambda s: s[0]) if keep else None


def profiled_part(trainer, device, steps, rank, out, cpu):
    """Notebook 06's profile part: `steps` steps of `trainer` (a DDP, warmed up here: DDP
    rebuilds its buckets after the first step) under torch.profiler; rank 0 keeps each one's
    overlap, the timeline events of the median one and its chrome trace (out/
    ddp_step_trace.json). One step's share is noisy on gloo."""
    for _ in range(3):
        trainer.step()
    steps = profiled_steps(trainer.step, device, steps, group=cpu, keep=rank == 0)
    if rank != 0:
        return None
    fraction, basis, events, prof = steps[len(steps) // 2]  # the median step
    prof.export_chrome_trace(os.path.join(out, "ddp_step_trace.json"))
    return {"events": events, "overlap_fraction": fraction, "overlap_basis": basis,
            "overlap_fractions": [s[0] for s in steps]}
