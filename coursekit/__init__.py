"""Plumbing for the course notebooks: tiers and parameters, the launcher runner, results.

Lesson content lives in the notebooks and launchers; this package only runs them.
"""

from . import progress
from .cells import show_diff, show_functions, show_lines, show_outline
from .claims import Claim, Claims, claim, evaluate, outcome_of, spread
from .config import ParameterError, Setup, configure
from .exercises import Tasks, answer, answer_file
from .nodes import JobResult, run_nodes
from .ranks import Ranks, live_ranks
from .result import LauncherFailed, LauncherTimeout, RunResult
from .results import load_results, save_results
from .runner import run_launcher

__all__ = [
    "Claim",
    "Claims",
    "JobResult",
    "LauncherFailed",
    "LauncherTimeout",
    "ParameterError",
    "Ranks",
    "RunResult",
    "Setup",
    "Tasks",
    "answer",
    "answer_file",
    "claim",
    "configure",
    "evaluate",
    "live_ranks",
    "load_results",
    "outcome_of",
    "progress",
    "run_launcher",
    "run_nodes",
    "save_results",
    "spread",
    "show_diff",
    "show_functions",
    "show_lines",
    "show_outline",
]
