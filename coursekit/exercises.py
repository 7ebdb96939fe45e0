"""The exercise pattern, the same in every notebook.

1. A cell where the learner writes the answer: a value, a function, or a launcher
   (a ``%%writefile`` cell).
2. One line that picks what gets checked::

       answer = coursekit.answer(my_answer, "01_why_is_my_second_gpu_idle", "device0_bytes")
       script = coursekit.answer_file("../launchers/ring_exercise.py", "ring_allreduce.py")

   Normally that is the learner's own answer. When reference solutions are requested
   (``make verify SOLUTIONS=1``, or the environment variable ``COURSE_SOLUTIONS`` naming a
   folder), it is the reference kept outside the notebooks, in ``solutions/``.
3. A check cell that tests the answer against the facts (never against the reference)
   and says right or wrong and why: ``coursekit.check_answer(ok, why_right, why_wrong)``.
   A wrong answer does not stop the notebook: the learner reads why and tries again.
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


def check_answer(ok: bool, why_right: str, why_wrong: str) -> bool:
    """Say right or wrong, and why; return ``ok`` for the results file."""
    print(("RIGHT: " + why_right) if ok else ("NOT YET: " + why_wrong))
    return bool(ok)
