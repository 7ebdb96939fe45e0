"""The course table (coursekit/course.py) is the contract: the notebooks, the README's
generated tables and CONTRIBUTING.md agree with it (the launchers: tests/test_launchers.py)."""

import subprocess
import sys

from conftest import NOTEBOOKS, ROOT

from coursekit.course import COURSE, KINDS, Notebook


def test_every_notebook_has_a_row_and_every_row_a_notebook():
    assert [nb.path for nb in COURSE] == NOTEBOOKS
    assert all(kind in KINDS for nb in COURSE for kind in nb.files.values())
    assert all(nb.test_ranks and all(n >= 1 for n in nb.test_ranks) for nb in COURSE)


def test_the_readme_tables_are_generated_from_the_table_and_the_record():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme.py"), "--check"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_contributing_follows_the_table():
    """CONTRIBUTING.md's checklist names every field of a row and every kind of file."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    fields = [f for f in Notebook.__dataclass_fields__]
    missing = [f"`{name}`" for name in [*fields, *KINDS] if f"`{name}`" not in text]
    assert not missing, f"CONTRIBUTING.md does not mention {', '.join(missing)}"
