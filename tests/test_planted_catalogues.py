"""The catalogues of planted mistakes (tests/planted/<catalogue>.py): every mistake is
its reference edited, each edit's old text found exactly once, and each changes the code, not
only the docstring. No launch: the notebooks' tests run the checks on them."""

import ast

import pytest
from conftest import ROOT
from task_kit import PLANTED, edited, load_module, mistakes, planted

CATALOGUES = sorted(p.stem for p in PLANTED.glob("*.py") if "\nMISTAKES = {" in p.read_text())


def code(text):
    """The module's statements, without its docstring."""
    return [ast.dump(node) for node in ast.parse(text).body[1:]]


def test_the_catalogues_are_found_and_replace_the_copies():
    assert len(CATALOGUES) == 15, CATALOGUES  # 13 tasks' catalogues and 2 hangs
    # nothing of the same name among the wrong answers a notebook's answer_file may read
    assert not [p for p in (PLANTED.parent / "solutions_wrong").iterdir() if p.stem in CATALOGUES]


@pytest.mark.parametrize("catalogue", CATALOGUES)
def test_every_mistake_is_its_reference_edited(catalogue, tmp_path):
    table = load_module(PLANTED / f"{catalogue}.py")
    reference = (ROOT / table.REFERENCE).read_text(encoding="utf-8")
    base = edited(reference, getattr(table, "SHARED", []), catalogue)  # as planted()
    texts = mistakes(catalogue)  # asserts: each old found exactly once, in turn
    files = planted(catalogue, tmp_path)
    assert list(files) == list(texts) and texts
    for name, path in files.items():
        text = path.read_text(encoding="utf-8")
        assert path.name == f"{name}.py" and text == texts[name]
        assert ast.get_docstring(ast.parse(text)), name  # it says what it plants
        assert code(text) != code(base) and code(text) != code(reference), name


def test_an_old_text_not_found_once_is_named(tmp_path, monkeypatch):
    import task_kit

    (tmp_path / "demo.py").write_text('REFERENCE = "solutions/zero1.py"\n'
                                      'MISTAKES = {"twice": [("\\n", "")]}\n')  # fmt: skip
    monkeypatch.setattr(task_kit, "PLANTED", tmp_path)
    with pytest.raises(AssertionError, match=r"demo: twice, edit 0: .* found \d+ times, not once"):
        mistakes("demo")
