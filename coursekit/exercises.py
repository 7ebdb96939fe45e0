"""The exercise pattern, the same in every notebook.

1. A cell where the learner writes the answer: a value, a function, or a launcher
   (a ``%%writefile`` cell).
2. One line that picks what gets checked::

       answer = coursekit.answer(my_answer, "01_why_is_my_second_gpu_idle", "device0_bytes")
       script = coursekit.answer_file("../launchers/ring_allreduce.py", "ring_allreduce.py")

   Normally that is the learner's own answer. When reference solutions are requested
   (``make verify SOLUTIONS=1``, or the environment variable ``COURSE_SOLUTIONS`` naming a
   folder), it is the reference kept outside the notebooks, in ``solutions/``.
3. A check cell that tests the answer against the facts (never against the reference)
   and records right or wrong and why with ``tasks.check`` (below). A wrong answer does not
   stop the notebook: the learner reads why and tries again.

:class:`Tasks` keeps a notebook's tasks and their outcomes (solved, not yet, not tried) for
its results file, ``make progress`` and the verify report. Two kinds of task:

- *predict, then measure*: the learner types a number or a choice before the cell that
  measures it; ``tasks.predict(name, guess, measured, ...)`` compares with the run's own
  figure (within its spread, or a tolerance) and says how far off;
- *write it*: ``tasks.check(name, ok, why_right, why_wrong)`` after a check against the facts;
  ``tasks.hint(name, n)`` prints its n-th hint.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SOLUTIONS_ENV = "COURSE_SOLUTIONS"
DEFAULT_SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


def solutions_dir() -> Path | None:
    """The folder of reference solutions in use, or None for the learner's own answers."""
    value = os.environ.get(SOLUTIONS_ENV)
    if not value:
        return None
    folder = DEFAULT_SOLUTIONS if value == "1" else Path(value)
    if not folder.is_dir():
        raise FileNotFoundError(f"{SOLUTIONS_ENV}={value!r}: no such folder of solutions")
    return folder


def answer(learner_answer, notebook: str, name: str):
    """The learner's answer, or the reference ``name`` from ``solutions/<notebook>.py``."""
    folder = solutions_dir()
    if folder is None:
        return learner_answer
    path = folder / f"{notebook}.py"
    spec = importlib.util.spec_from_file_location(f"solutions_{notebook}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(f"(checking the reference solution {name} from {folder.name}/{notebook}.py)")
    return getattr(module, name)


def answer_file(learner_file: str | os.PathLike, solution_name: str) -> Path:
    """The learner's launcher, or the reference launcher ``solutions/<solution_name>``."""
    folder = solutions_dir()
    if folder is None:
        return Path(learner_file)
    print(f"(running the reference solution {folder.name}/{solution_name})")
    return folder / solution_name


SOLVED, NOT_YET, NOT_TRIED = "solved", "not yet", "not tried"
TASK_OUTCOMES = (SOLVED, NOT_YET, NOT_TRIED)
PREDICT, WRITE = "predict", "write"
HINTS_FILE = DEFAULT_SOLUTIONS / "hints.yaml"  # beside the reference solutions, read on request


def _shown(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _normalised(value):
    """A prediction as it is compared: text without case or extra spaces, a list as a tuple,
    each element normalised too ("Forward", ["forward"] and ("forward",) are one answer)."""
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, list | tuple):
        return tuple(_normalised(v) for v in value)
    if isinstance(value, dict):
        return {_normalised(k): _normalised(v) for k, v in value.items()}
    return value


def course_hints() -> dict[str, list[str]]:
    """Task name -> its hints, weakest first, the last one close to the answer
    (solutions/hints.yaml)."""
    import yaml

    return yaml.safe_load(HINTS_FILE.read_text(encoding="utf-8"))


class Tasks:
    """A notebook's tasks for the learner, in the order it sets them, with their latest outcomes.

    A check may run as often as the learner likes: each run prints its verdict and replaces the
    task's outcome (NOT YET, fix, run again, RIGHT)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self._hints_given: dict[str, int] = {}

    def _keep(self, name: str, kind: str, outcome: str, message: str) -> bool:
        record = {"name": name, "kind": kind, "outcome": outcome}
        earlier = [i for i, r in enumerate(self.records) if r["name"] == name]
        if earlier:
            self.records[earlier[0]] = record  # the latest verdict, in the task's first place
        else:
            self.records.append(record)
        print(message)
        return outcome == SOLVED

    def predict(self, name: str, guess, measured, *, low=None, high=None, within: float = 0.0,
                unit: str = "", why: str = "") -> bool:  # fmt: skip
        """Compare the learner's prediction ``guess`` (None: not tried) with the run's
        ``measured``: a number is right inside [low, high] (the spread the run measured), else
        within ``within`` (a fraction) of ``measured``; anything else must equal it once
        normalised (case and spacing of text, a list or a tuple). ``why`` says what decides the
        answer, shown when the guess is off."""
        if guess is None or guess is ...:
            return self._keep(name, PREDICT, NOT_TRIED,
                              f"(no prediction for {name}: the run measured "
                              f"{_shown(measured)}{unit})")  # fmt: skip
        numeric = isinstance(measured, int | float) and not isinstance(measured, bool)
        if numeric:
            if not isinstance(guess, int | float) or isinstance(guess, bool):
                return self._keep(name, PREDICT, NOT_YET,
                                  f"NOT YET ({name}): give a number, not {guess!r}")  # fmt: skip
            low = measured * (1 - within) if low is None else low
            high = measured * (1 + within) if high is None else high
            right = min(low, high) <= guess <= max(low, high)
            off = (f"{guess / measured:.2g}x the measurement" if measured
                   else f"{guess - measured:+.3g} from it")  # fmt: skip
            spread = f" (the run's range {_shown(low)} to {_shown(high)}{unit})" if low != high \
                else ""
        else:
            right, off, spread = _normalised(guess) == _normalised(measured), "", ""
        said = f"you predicted {_shown(guess)}{unit}, the run measured {_shown(measured)}{unit}"
        if right:
            return self._keep(name, PREDICT, SOLVED, f"RIGHT ({name}): {said}{spread}")
        detail = f": {off}. {why}" if off else f": {why}" if why else ""
        return self._keep(name, PREDICT, NOT_YET,
                          f"NOT YET ({name}): {said}{spread}{detail}".rstrip(". ") + ".")

    def check(self, name: str, ok: bool | None, why_right: str, why_wrong: str) -> bool:
        """A written task checked against the facts: ``ok`` None when the learner's code is
        still the unfinished starter (not tried), else right or wrong, with why."""
        if ok is None:
            return self._keep(name, WRITE, NOT_TRIED, f"(not tried yet: {name}) {why_wrong}")
        outcome = SOLVED if ok else NOT_YET
        prefix = "RIGHT" if ok else "NOT YET"
        return self._keep(name, WRITE, outcome,
                          f"{prefix} ({name}): {why_right if ok else why_wrong}")  # fmt: skip

    def hint(self, name: str, n: int | None = None) -> None:
        """Print a hint of task ``name``: the next one not yet shown, or the n-th. Hints are
        kept beside the reference solutions (solutions/hints.yaml) and read only on request,
        so a hint works before the task's check has run."""
        hints = course_hints().get(name)
        if not hints:
            known = ", ".join(sorted(course_hints()))
            raise ValueError(f"tasks.hint({name!r}): no task of that name has hints (tasks with "
                             f"hints: {known})")  # fmt: skip
        if n is None:
            n = min(self._hints_given.get(name, 0) + 1, len(hints))
        if not 1 <= n <= len(hints):
            raise ValueError(f"tasks.hint({name!r}, {n}): it has {len(hints)} hint(s), ask for 1 "
                             f"to {len(hints)}")  # fmt: skip
        self._hints_given[name] = max(self._hints_given.get(name, 0), n)
        more = " (the last one)" if n == len(hints) else f"; run it again for hint {n + 1}"
        print(f"hint {n} of {len(hints)} ({name}){more}: {hints[n - 1]}")

    def summary(self) -> dict:
        return {o: sum(r["outcome"] == o for r in self.records) for o in TASK_OUTCOMES}
