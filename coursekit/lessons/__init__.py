"""Each notebook's machinery, out of the learner's sight: one module per notebook, ``nbNN.py``.

A notebook shows its lesson: its DDP lines, the run, the picture, the task. The sentences its
run checks (claims), its results record and its closing table live here, called in one line
where the lesson makes them::

    from coursekit.lessons import nb03 as lesson
    lesson.claim_replicas(claims, first=first, before=before, after_wrap=after_wrap)
    lesson.save(setup, claims, tasks, first=first, run=run, ...)
    lesson.close(setup, claims)

Each module names its notebook in ``STEM``; its claim sentences stay templates filled in from
the figures (docs/claims.md lists them), as in coursekit/claims.py.
"""

from __future__ import annotations

from .. import progress

TROUBLESHOOTING = ("An error message of your own? [docs/troubleshooting.md]"
                   "(../docs/troubleshooting.md) has the ones learners meet most, with their "
                   "cause, their fix and the lesson that teaches it.")  # fmt: skip


def closing(setup, claims, stem: str) -> None:
    """The end of a lesson: its claims counted by outcome, the learner's tasks, and where the
    common error messages are explained."""
    from IPython.display import Markdown, display

    claims.show()
    progress.show(setup, stem)
    display(Markdown(TROUBLESHOOTING))
