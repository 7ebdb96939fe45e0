"""The class plan: what every seat of a workshop server gets, before anything starts.

    python -m coursekit.classplan --seats 16 --gpus 8 --cores 64 --memory-gib 512 \\
        [--gpus-per-seat K] [--gpu-ids 0,1,...] [--json]          (or: make class-plan SEATS=...)

Given the server's GPUs, cores and memory and the number of seats (attendees), the plan says
what each seat gets: its GPU ids, the cores it is pinned to, the threads its ranks get, its
memory, the tier and ``NPROC`` its notebooks will find (the decision of
:func:`coursekit.config.tier_for`, which ``configure`` makes in every notebook), what each
notebook does on that tier, and the environment its JupyterLab server starts with. The hub
(jupyter/class-hub/) reads :meth:`ClassPlan.as_json`.

A plan that cannot work is refused with a :class:`PlanError` naming the parameter and the fix:
more seats than GPUs when each seat needs one, GPU ids named twice (NCCL refuses two ranks on
one GPU: "Duplicate GPU detected", docs/troubleshooting.md), less memory per seat than the
course's measured floor (:data:`MEMORY_FLOOR_GIB`). Left out, the hardware is this machine's:
its logical cores, its memory and the GPUs NVML counts (no torch import).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field

from .config import CPU_DEFAULT_NPROC, tier_for
from .course import COURSE, MESH, Notebook

# The memory floor of a seat, from the course's own measurements on the 2-core CPU machine
# (torch 2.13, CPU build; peak resident memory of the seat's whole process tree: kernel,
# live-rank pool, torchrun, its ranks, and papermill standing in for the Jupyter server):
# - notebook 00 at SMOKE: 1125 MiB, of which its 2 ranks 227 MiB each;
# - notebook 12 at SMOKE: 1912 MiB, its 2 x 2 mesh's 4 ranks at 325 MiB each (the most ranks
#   a notebook starts at once);
# - notebook 06 at full size, the largest rank the course records: 743,559,168 bytes (709 MiB)
#   of peak RSS per rank (build/results/06_bench_metrics.json, ``ranks[].peak_bytes``), so
#   its 2 ranks make about 1125 - 2 * 227 + 2 * 709 = 2089 MiB.
# docs/class-server.md shows the measurement. 2.5 GiB leaves a fifth on top for the Jupyter
# server and the page cache; a GPU seat's ranks hold a CUDA context on top of that.
SEAT_BASE_MIB = 1125 - 2 * 227
RANK_PEAK_MIB = 709
MESH_SMOKE_MIB = 1912
MEMORY_FLOOR_GIB = 2.5
assert MEMORY_FLOOR_GIB * 1024 >= 1.2 * max(SEAT_BASE_MIB + CPU_DEFAULT_NPROC * RANK_PEAK_MIB,
                                            MESH_SMOKE_MIB)

MESH_RANKS = 4  # a MESH launcher's 2 x 2 device mesh (coursekit/course.py)
RUNS = "runs"

# What a notebook does differently on a tier, beyond the ranks configure() gives it: each entry
# names the notebook, when it applies (tier, visible GPUs) -> the sentence, and the condition
# in the course's source that decides it (a test checks each source still says so).
TIER_LIMITS = (
    ("01", lambda tier, gpus: gpus < 2,
     "real DataParallel needs 2 GPUs: it shows DP rebuilt on virtual devices instead",
     "coursekit/lessons/nb01.py", 'if gpu["devices"] > 1:'),
    ("06", lambda tier, gpus: gpus < 2,
     "DataParallel cannot split on fewer than 2 GPUs: it races DP re-implemented on the CPU",
     "launchers/nb06/scaling_models.py", "DP re-implemented"),
    ("08", lambda tier, gpus: tier == "multi-gpu",
     "the hang is not located by stack dumps under NCCL (the ranks wait on their GPUs)",
     "coursekit/lessons/nb08.py", 'if backend == "nccl":'),
)


class PlanError(ValueError):
    """A class plan that cannot work; the message names the parameter and the fix."""


@dataclass
class Seat:
    """One attendee's share of the server."""

    name: str  # "seat01"
    gpu_ids: list[int]  # physical GPU ids (nvidia-smi's numbering)
    cpus: list[int]  # the core ids the seat's server and everything it starts are pinned to
    threads: int  # OMP_NUM_THREADS: intra-op threads per rank
    memory_gib: float
    tier: str  # what coursekit.configure will find: "cpu", "single-gpu", "multi-gpu"
    nproc: int  # the tier's default NPROC
    notebooks: dict[str, str] = field(default_factory=dict)  # stem -> "runs" or what differs
    env: dict[str, str] = field(default_factory=dict)  # the seat's server's environment
    notes: list[str] = field(default_factory=list)


@dataclass
class ClassPlan:
    seats: list[Seat]
    gpus: int
    gpu_ids: list[int]
    cores: int
    memory_gib: float
    spare_cpus: list[int]  # cores no seat is pinned to: the hub's, the system's
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        """What the hub's configuration reads: the hardware, the seats and the notes."""
        return {
            "hardware": {"gpus": self.gpus, "gpu_ids": self.gpu_ids, "cores": self.cores,
                         "memory_gib": self.memory_gib},
            "memory_floor_gib": MEMORY_FLOOR_GIB,
            "spare_cpus": self.spare_cpus,
            "notes": self.notes,
            "seats": [asdict(s) for s in self.seats],
        }

    def table(self) -> str:
        """The plan as text: a row per seat, then what the notebooks do on each tier."""
        rows = [("seat", "GPUs", "cores", "threads", "memory", "tier", "NPROC")]
        for s in self.seats:
            rows.append((s.name, ",".join(map(str, s.gpu_ids)) or "-", _ranges(s.cpus),
                         str(s.threads), f"{s.memory_gib:g} GiB", s.tier, str(s.nproc)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                 for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        hardware = (f"{_n(self.gpus, 'GPU')}, {_n(self.cores, 'core')}, {self.memory_gib:g} "
                    f"GiB: {_n(len(self.seats), 'seat')}")
        if self.spare_cpus:
            hardware += f"; cores {_ranges(self.spare_cpus)} left to the hub and the system"
        out = [hardware, "", *lines]
        seen = {}
        for s in self.seats:
            seen.setdefault((s.tier, len(s.gpu_ids), len(s.cpus)), s)
        for (tier, _, _), s in seen.items():
            out += ["", f"on the {tier} tier ({s.name} and seats like it):"]
            out += [f"  {stem[:2]} {what}" for stem, what in s.notebooks.items()]
            out += [f"  note: {n}" for n in s.notes]
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


def _n(count: int, word: str) -> str:
    """2, "core" -> "2 cores"."""
    return f"{count} {word}{'s' * (count != 1)}"


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    parts, start = [], None
    for i, x in enumerate(ids):
        if start is None:
            start = x
        if i + 1 == len(ids) or ids[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts) or "-"


def min_nproc(nb: Notebook) -> int:
    """The ``min_nproc`` a notebook's ``configure`` call asks for (1 when it asks for none)."""
    found = re.findall(r"min_nproc=(\d+)", nb.path.read_text()) if nb.path.exists() else []
    return max(map(int, found), default=1)


def notebooks_on(tier: str, nproc: int, gpus: int, cores: int) -> tuple[dict[str, str], list]:
    """Per notebook stem, "runs" or what it does instead on this tier; and notes on cores."""
    out, notes = {}, []
    for nb in COURSE:
        said = []
        least = min_nproc(nb)
        if nproc < least:  # configure(min_nproc=...) moves the runs to the CPU
            said.append(f"runs {least} CPU ranks over gloo ({nproc} rank per run shows nothing "
                        "here)")
        if nb.launchers(MESH) and gpus < MESH_RANKS:
            names = ", ".join(nb.launchers(MESH))
            said.append(f"its 2 x 2 mesh ({names}) runs {MESH_RANKS} CPU ranks over gloo "
                        f"(needs {MESH_RANKS} GPUs)")
        said += [text for number, applies, text, _, _ in TIER_LIMITS
                 if number == nb.number and applies(tier, gpus)]
        out[nb.stem] = "; ".join(said) or RUNS
    ranks = max(nproc, CPU_DEFAULT_NPROC)
    if cores < ranks:
        notes.append(f"{_n(cores, 'core')} for {ranks} ranks: the ranks take turns on them")
    if any(nb.launchers(MESH) for nb in COURSE) and gpus < MESH_RANKS and cores < MESH_RANKS:
        notes.append(f"notebook 12's mesh runs {MESH_RANKS} ranks on {_n(cores, 'core')}")
    return out, notes


def gpus_in(env: dict[str, str]) -> int:
    """How many GPUs a process started with ``env`` sees (``CUDA_VISIBLE_DEVICES``: unset, all;
    "" none; "2,3" two). The plan always sets it; unset counts as unknown (-1)."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return -1
    return len([x for x in visible.split(",") if x.strip()])


def _count(name: str, value, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        least = "at least 1" if low else "0 or more"
        raise PlanError(f"{name}={value!r}: give a whole number, {least}")
    return value


def plan(seats: int, gpus: int, cores: int, memory_gib: float, gpus_per_seat: int | None = None,
         gpu_ids: list[int] | None = None) -> ClassPlan:
    """Seat ``seats`` attendees on a server; raises :class:`PlanError` for a plan that cannot
    work, before anything starts."""
    seats = _count("--seats", seats, 1)
    gpus = _count("--gpus", gpus)
    cores = _count("--cores", cores, 1)
    if (isinstance(memory_gib, bool) or not isinstance(memory_gib, int | float)
            or not memory_gib > 0):
        raise PlanError(f"--memory-gib={memory_gib!r}: give the server's memory in GiB, above 0")
    if gpus_per_seat is not None:
        gpus_per_seat = _count("--gpus-per-seat", gpus_per_seat)
    if gpu_ids is None:
        gpu_ids = list(range(gpus))
    gpu_ids = [_count("--gpu-ids", i) for i in gpu_ids]
    twice = sorted({i for i in gpu_ids if gpu_ids.count(i) > 1})
    if twice:
        raise PlanError(f"--gpu-ids names GPU {','.join(map(str, twice))} twice: two seats' ranks "
                        "on one GPU fail in NCCL (\"Duplicate GPU detected\"): name each GPU once")
    if len(gpu_ids) != gpus:
        raise PlanError(f"--gpu-ids names {len(gpu_ids)} GPU(s) and --gpus says {gpus}: name "
                        f"every GPU the seats may use, once (or pass --gpus {len(gpu_ids)})")

    if gpus_per_seat is None:
        if gpus == 0:
            gpus_per_seat = 0
        elif gpus < seats:
            raise PlanError(
                f"--seats {seats}: {seats} seats need {seats} GPUs, this server has {gpus}: pass "
                f"--seats {gpus}, or --gpus-per-seat 0 to seat everyone on the CPU tier")
        else:
            gpus_per_seat = 1
    if seats * gpus_per_seat > gpus:
        fit = gpus // gpus_per_seat
        fix = f"pass --seats {fit}, or " if fit else ""
        raise PlanError(
            f"--gpus-per-seat {gpus_per_seat}: {seats} seats x {gpus_per_seat} GPU(s) need "
            f"{seats * gpus_per_seat} GPUs, this server has {gpus}: {fix}--gpus-per-seat "
            f"{gpus // seats} (GPUs are never shared: NCCL refuses two ranks on one GPU)")

    per_seat_gib = math.floor(memory_gib / seats * 10) / 10
    if per_seat_gib < MEMORY_FLOOR_GIB:
        fit = int(memory_gib // MEMORY_FLOOR_GIB)
        fix = (f"pass --seats {fit}" if fit else "this server cannot seat anyone") + (
            ", or give the seats more memory with --memory-gib")
        raise PlanError(
            f"--memory-gib {memory_gib:g}: {seats} seat(s) get {per_seat_gib:g} GiB each, under "
            f"the {MEMORY_FLOOR_GIB:g} GiB a seat's runs peak at (measured: "
            f"coursekit/classplan.py): {fix}")

    notes = []
    if seats <= cores:
        per = cores // seats
        cpu_sets = [list(range(i * per, (i + 1) * per)) for i in range(seats)]
        spare = list(range(seats * per, cores))
    else:  # a workshop on a small server: seats share cores, round-robin
        cpu_sets = [[i % cores] for i in range(seats)]
        spare = []
        notes.append(f"{seats} seats share {_n(cores, 'core')}: each run will be slower, "
                     "measured in docs/class-server.md")

    out = []
    for i in range(seats):
        ids = gpu_ids[i * gpus_per_seat:(i + 1) * gpus_per_seat]
        cpus = cpu_sets[i]
        _, tier, nproc = tier_for(len(ids))
        threads = max(1, len(cpus) // max(nproc, CPU_DEFAULT_NPROC))
        env = {
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids)),
            # CUDA numbers GPUs fastest first unless told; nvidia-smi (and these ids) by bus
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            # each rank's threads, set once for the seat (the runner would also divide the cores
            # the seat is pinned to between its ranks)
            "OMP_NUM_THREADS": str(threads),
            # more threads than the seat's cores (notebook 12's 4 ranks): waiting threads sleep
            "OMP_WAIT_POLICY": "PASSIVE",
        }
        notebooks, seat_notes = notebooks_on(tier, nproc, len(ids), len(cpus))
        out.append(Seat(name=f"seat{i + 1:02d}", gpu_ids=ids, cpus=cpus, threads=threads,
                        memory_gib=per_seat_gib, tier=tier, nproc=nproc, notebooks=notebooks,
                        env=env, notes=seat_notes))
    unused = gpu_ids[seats * gpus_per_seat:]
    if unused:
        notes.append(f"{_n(len(unused), 'GPU')} ({','.join(map(str, unused))}) left to no seat")
    return ClassPlan(seats=out, gpus=gpus, gpu_ids=gpu_ids, cores=cores, memory_gib=memory_gib,
                     spare_cpus=spare, notes=notes)


def this_machine() -> tuple[int, int, float]:
    """(GPUs, cores, memory GiB) of this machine: NVML's GPU count (0 without a driver), the
    logical cores, the physical memory."""
    import psutil

    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            gpus = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver (pynvml.NVMLError), or no pynvml
        gpus = 0
    memory = math.floor(psutil.virtual_memory().total / 2**30 * 10) / 10
    return gpus, os.cpu_count() or 1, memory


def _ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give GPU ids as 0,1,2") from None


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The plan's options (this command's, and the class hub's: coursekit/classhub.py)."""
    parser.add_argument("--seats", type=int, required=True, help="attendees, one seat each")
    parser.add_argument("--gpus", type=int, help="GPUs of the server (default: NVML's count)")
    parser.add_argument("--cores", type=int, help="cores of the server (default: this one's)")
    parser.add_argument("--memory-gib", type=float, help="memory the seats share (default: all)")
    parser.add_argument("--gpus-per-seat", type=int, help="0 seats everyone on the CPU tier")
    parser.add_argument("--gpu-ids", type=_ids, help="the GPUs to use, as 0,1,2 (default: all)")


def plan_from(args: argparse.Namespace) -> ClassPlan:
    """The plan the options of :func:`add_plan_arguments` ask for, on this machine's hardware
    where they name none."""
    gpus, cores, memory = this_machine()
    if args.gpus is None and args.gpu_ids is not None:
        gpus = len(args.gpu_ids)
    return plan(args.seats, gpus if args.gpus is None else args.gpus,
                cores if args.cores is None else args.cores,
                memory if args.memory_gib is None else args.memory_gib,
                gpus_per_seat=args.gpus_per_seat, gpu_ids=args.gpu_ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.classplan",
                                     description=__doc__.split("\n\n")[1])
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = parser.parse_args(argv)
    try:
        result = plan_from(args)
    except PlanError as e:
        print(f"class plan refused: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result.as_json(), indent=1) if args.json else result.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
