"""The parameters contract and hardware tiers.

Every notebook calls :func:`configure` right after its ``parameters`` cell. It checks
the parameters before any process starts and decides the tier: which device, which
backend and how many ranks a launched run gets on this machine.
"""

from __future__ import annotations

import importlib.metadata
import numbers
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEVICES = ("auto", "cpu", "cuda")
CPU_DEFAULT_NPROC = 2
DEFAULT_RESULTS_DIR = "../build/results"
# the notebooks name their launchers and results relative to notebooks/ ("../launchers/x.py")
NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"


class ParameterError(ValueError):
    """A notebook parameter has a value the course cannot use; the message says the fix."""


@dataclass(frozen=True)
class Setup:
    """What this machine will do: the answer to "which tier am I on?"."""

    device: str  # "cpu" or "cuda"
    tier: str  # "cpu", "single-gpu" or "multi-gpu"
    backend: str  # what a launcher with `nproc` ranks will use
    nproc: int
    timeout_s: float
    smoke: bool
    results_dir: Path
    runs_dir: Path
    gpu_names: list[str] = field(default_factory=list)
    note: str = ""  # why the notebook runs on another tier than the one this machine offers

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_names)

    def describe(self) -> str:
        gpus = ", ".join(self.gpu_names) if self.gpu_names else "none"
        lines = [
            f"tier     {self.tier}",
            f"device   {self.device}   (GPUs visible: {gpus})",
            f"backend  {self.backend}",
            f"ranks    {self.nproc} per launched run",
            f"timeout  {self.timeout_s:g} s per launched run",
            f"sizes    {'SMOKE (tiny, for verification)' if self.smoke else 'full'}",
        ]
        if self.note:
            lines.append(f"note     {self.note}")
        if self.device == "cuda" and self.nproc > self.n_gpus:
            lines.append(
                f"note     {self.nproc} ranks share {self.n_gpus} GPU(s): NCCL needs one GPU "
                "per rank, so runs use gloo"
            )
        return "\n".join(lines)


def _fail(name: str, value: object, fix: str) -> ParameterError:
    return ParameterError(f"{name}={value!r} cannot be used: {fix}")


def backend_for(device: str, nproc: int, n_gpus: int) -> str:
    """NCCL when every rank owns a GPU; gloo otherwise (CPU, or ranks sharing a GPU)."""
    return "nccl" if device == "cuda" and nproc <= n_gpus else "gloo"


def tier_for(n_gpus: int, DEVICE: str = "auto") -> tuple[str, str, int]:  # noqa: N803
    """(device, tier, default ranks per run) where PyTorch sees ``n_gpus`` GPUs: the decision
    :func:`configure` makes (the class plan, coursekit/classplan.py, promises its seats the same).
    ``n_gpus`` follows ``CUDA_VISIBLE_DEVICES``: "" shows none, "2,3" two."""
    device = "cuda" if DEVICE == "cuda" or (DEVICE == "auto" and n_gpus > 0) else "cpu"
    if device == "cpu":
        return device, "cpu", CPU_DEFAULT_NPROC
    return device, ("single-gpu" if n_gpus == 1 else "multi-gpu"), n_gpus


def visible_gpus() -> list[str]:
    """Names of the CUDA GPUs PyTorch can use here."""
    if importlib.metadata.version("torch").endswith("+cpu"):
        return []  # a CPU-only build sees no GPU: no need to spend 2 s importing it to ask
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def check_parameters(DEVICE, NPROC, TIMEOUT_S, SMOKE) -> None:  # noqa: N803
    """The checks that need no hardware (and no torch import): they run first."""
    if DEVICE not in DEVICES:
        raise _fail("DEVICE", DEVICE, f"use one of {', '.join(map(repr, DEVICES))}")
    if NPROC is not None and (isinstance(NPROC, bool) or not isinstance(NPROC, numbers.Integral)):
        raise _fail("NPROC", NPROC, "use a whole number such as 2, or None for the default")
    if NPROC is not None and NPROC < 1:
        raise _fail("NPROC", NPROC, "a run needs at least one rank: use NPROC=1 or more")
    if isinstance(TIMEOUT_S, bool) or not isinstance(TIMEOUT_S, numbers.Real) or not TIMEOUT_S > 0:
        raise _fail("TIMEOUT_S", TIMEOUT_S, "use a positive number of seconds, such as 300")
    if not isinstance(SMOKE, bool):
        raise _fail("SMOKE", SMOKE, "use True or False")


def enter_notebooks_dir(results_dir: str | os.PathLike) -> tuple[Path, str]:
    """Make the kernel work in the course's notebooks/ folder, wherever it started.

    papermill and some front ends start the kernel in the caller's folder, where
    "../launchers" is not the course's. A RESULTS_DIR the caller gave stays relative to the
    folder they gave it in; the default one is the course's build/results. Returns the
    results folder and a note for the learner ("" when nothing had to change).
    """
    here = Path.cwd()
    if (here / ".." / "launchers").is_dir() or "ipykernel" not in sys.modules:
        return Path(results_dir), ""  # a course folder (or a copy of one), or not a notebook
    if not (NOTEBOOKS_DIR.is_dir() and (NOTEBOOKS_DIR.parent / "launchers").is_dir()):
        raise ParameterError(
            f"this kernel works in {here}, and the course's notebooks/ folder is not where "
            f"coursekit expects it ({NOTEBOOKS_DIR}): install the course with `make setup` "
            "(an editable install of its coursekit), or run papermill with --cwd notebooks"
        )
    if str(results_dir) != DEFAULT_RESULTS_DIR:
        results_dir = (here / results_dir).resolve()
    os.chdir(NOTEBOOKS_DIR)
    return Path(results_dir), (f"the kernel started in {here}; the notebooks name their files "
                               f"from notebooks/, so it now works in {NOTEBOOKS_DIR}")


def share_launcher_modules() -> None:
    """Make the course's launchers/ folder importable in the kernel (``from common import
    memory``), as torchrun makes it for every launcher it starts: the notebooks and the
    launchers import the same modules beside the launchers, never lesson code from coursekit."""
    launchers = Path("../launchers").resolve()
    if launchers.is_dir() and str(launchers) not in sys.path:
        sys.path.append(str(launchers))


def configure(
    DEVICE: str = "auto",  # noqa: N803 - the notebooks' parameter names, verbatim
    NPROC: int | None = None,  # noqa: N803
    TIMEOUT_S: float = 300,  # noqa: N803
    RESULTS_DIR: str | os.PathLike = DEFAULT_RESULTS_DIR,  # noqa: N803
    SMOKE: bool = False,  # noqa: N803
    min_nproc: int = 1,
    quiet: bool = False,
) -> Setup:
    """Validate the notebook parameters and pick the tier. Raises ParameterError.

    A notebook whose lesson happens between ranks (collectives, pitfalls, scaling) asks for
    ``min_nproc=2``: where the tier would give it fewer ranks (one GPU, or NPROC=1), its runs
    get that many ranks on the CPU tier instead, and the setup's note says why.
    """
    check_parameters(DEVICE, NPROC, TIMEOUT_S, SMOKE)
    gpu_names = visible_gpus()
    n_gpus = len(gpu_names)
    if DEVICE == "cuda" and n_gpus == 0:
        raise _fail(
            "DEVICE",
            DEVICE,
            "no CUDA GPU is visible to PyTorch here. Use DEVICE='auto' (or 'cpu') to run on "
            "the CPU tier, or check nvidia-smi and CUDA_VISIBLE_DEVICES",
        )
    device, tier, default_nproc = tier_for(n_gpus, DEVICE)
    nproc = int(NPROC) if NPROC is not None else default_nproc
    note = ""
    if nproc < min_nproc:
        note = (f"{nproc} rank(s) per run would show nothing here: this notebook runs "
                f"{min_nproc} ranks on the CPU (gloo) instead")
        if device == "cuda":
            note += f"; its per-GPU figures need {min_nproc} GPUs or more"
        device, tier, nproc = "cpu", "cpu", min_nproc

    results_dir, moved = enter_notebooks_dir(RESULTS_DIR)
    share_launcher_modules()
    if moved and not quiet:
        print(f"note     {moved}")
    setup = Setup(
        device=device,
        tier=tier,
        backend=backend_for(device, nproc, n_gpus),
        nproc=nproc,
        timeout_s=float(TIMEOUT_S),
        smoke=SMOKE,
        results_dir=results_dir,
        runs_dir=results_dir.parent / "runs",
        gpu_names=gpu_names,
        note=note,
    )
    if not quiet:
        print(setup.describe())
    return setup
