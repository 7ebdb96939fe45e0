"""Notebook 00, environment check: its claims and results record."""

from __future__ import annotations

import sys

import torch

from ..results import save_results
from . import closing

STEM = "00_environment_check"


def claim_allreduce(claims, *, check: dict, check_ranks: int, expected: float) -> bool:
    """Whether every rank received the sum; claimed with its figures."""
    ranks = check["ranks"]
    ok = all(r["received"] == expected for r in ranks) and len(ranks) == check_ranks
    claims.check(
        "All-reduce over {n} ranks ({backend}) gave {expected:g} on every rank",
        "allreduce_ok == True", n=check_ranks, backend=check["backend"], expected=expected,
        allreduce_ok=ok,
        otherwise="all-reduce over {n} ranks ({backend}) did not give {expected:g} on every rank: "
                  "the ranks could not exchange tensors here (see the run's output above for the "
                  "failing rank)")  # fmt: skip
    return ok


def save(setup, claims, tasks, *, checks: dict, allreduce_ok: bool, check: dict, run, received,
         live_ok: bool, held, live_start_seconds: float) -> str:  # fmt: skip
    """The verdict (READY or NOT READY) as a claim, and the results record; returns the verdict."""
    ready = all(checks.values())
    made = claims.check(
        "READY: the course will run on the {tier} tier ({backend}, {nproc} rank(s) per run)",
        "ready == True", tier=setup.tier, backend=setup.backend, nproc=setup.nproc, ready=ready,
        otherwise="NOT READY on the {tier} tier: a check above failed (its FAIL line says which)")
    verdict = made.sentence()
    save_results(STEM, {
        "verdict": verdict,
        "ready": ready,
        "allreduce_ok": allreduce_ok,
        "allreduce_world_size": check["world_size"],
        "allreduce_backend": check["backend"],
        "allreduce_run_seconds": run.seconds,
        "allreduce_init_seconds": check["init_seconds"],
        "allreduce_received": repr(received),
        "live_ranks_ok": live_ok,
        "live_ranks_start_seconds": live_start_seconds,
        "live_gathered": repr([h and h[0] for h in held]),
        "torch_version": torch.__version__,
        "python_executable": sys.executable,
        "n_gpus": setup.n_gpus,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip
    return verdict


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
