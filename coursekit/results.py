"""The results contract: each notebook's key figures in RESULTS_DIR/<notebook stem>.json.

Flat ``name: number | string | bool``, plus the tier the notebook ran on, ``claims``: the
lesson's measured sentences, each with its figures, condition and outcome here (held, not
held, no difference, skipped: see :mod:`coursekit.claims`), and ``tasks``: the learner's
tasks and their outcomes (solved, not yet, not tried: :class:`coursekit.exercises.Tasks`).
Tests, ``make progress`` and the verify report read these files, never the printed text.
"""

from __future__ import annotations

import json
import math
import numbers
from collections import Counter
from pathlib import Path

from .claims import Claim
from .config import Setup
from .exercises import Tasks


def save_results(stem: str, figures: dict, setup: Setup, claims: list[Claim] = (),
                 tasks: Tasks | None = None) -> Path:  # fmt: skip
    """Write ``figures``, ``claims`` and ``tasks`` for notebook ``stem`` and say where, in one
    line (the figures are the file's, for the tests and the report: the lesson has shown what
    they mean); returns the file's path."""
    record: dict[str, object] = {"notebook": stem, "tier": setup.tier, "device": setup.device,
                                 "nproc": setup.nproc, "smoke": setup.smoke}
    for name, value in figures.items():
        if name in record or name in ("claims", "tasks"):
            raise ValueError(f"result {name!r}: that name is the results file's own")
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            value = value.item() if hasattr(value, "item") else value  # numpy / torch scalars
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"result {name!r} is {value}: only finite numbers are figures")
        elif not isinstance(value, (str, bool)):
            raise TypeError(f"result {name!r} is a {type(value).__name__}: figures are flat "
                            "numbers, strings or booleans")
        record[name] = value
    record["claims"] = [c.as_record() for c in claims]
    record["tasks"] = tasks.records if tasks is not None else []
    setup.results_dir.mkdir(parents=True, exist_ok=True)
    path = setup.results_dir / f"{stem}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    counts = Counter(c.outcome for c in claims)
    outcomes = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    solved = sum(r["outcome"] == "solved" for r in record["tasks"])
    print(f"results -> {path}: {len(figures)} figures, {len(claims)} claims "
          f"({outcomes or 'none'}), {solved} of {len(record['tasks'])} tasks solved")
    return path


def load_results(stem: str, results_dir: str | Path) -> dict:
    return json.loads((Path(results_dir) / f"{stem}.json").read_text())
