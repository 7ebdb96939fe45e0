"""docs/claims.md is made from the source (coursekit/claims_doc.py) in seconds, with no kernel:
each claim's sentence, its condition and the branches that make it. Each notebook's own test
checks that every claim its run made is listed there (conftest.assert_claims_contract)."""

import textwrap

import nbformat
import pytest

from coursekit import claims_doc

LESSON = '''
SENTENCES = ("first of two {a}", "second of two {b}")
SPREAD = "spread {ratio_low:.2f}x"


def claim_speed(claims, fast):
    claims.compare("A beat B by {ratio:.2f}x (" + SPREAD + ")", less=fast, more=fast,
                   otherwise="B won", tie="no winner")


def claim_memory(claims, device, held):
    text = "device 0 held {x} MB"
    if device == "cuda":
        claims.check(text, "x > 1", otherwise="it held {x}", x=2)
    else:
        claims.skip(text, why="no GPU here")
    claims.check("balanced: " + ("yes {y}" if held else "no {y}"), "y < 1", otherwise="n", y=0)
    for sentence in SENTENCES:
        claims.skip(sentence, why="not run")
    claim_speed(claims, [1, 2])


def claim_unreached(claims):
    claims.check("no cell calls this {z}", "z == 1", otherwise="n", z=1)
'''


def made_up_course(tmp_path, monkeypatch, lesson: str = LESSON):
    """A course of one notebook (99) and its lesson module, where claims_doc looks."""
    (tmp_path / "lessons").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "lessons" / "nb99.py").write_text(lesson)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%%writefile ../launchers/x.py\nclaims.check(1, 2)"),
                nbformat.v4.new_code_cell("if setup.ranks > 1:\n    lesson.claim_memory(claims, "
                                          "setup.device, held=True)"),
                nbformat.v4.new_code_cell('claims.check("the cell says {n}", "n == 2", n=2)')]
    nbformat.write(nb, tmp_path / "notebooks" / "99_made_up.ipynb")
    for name, path in (("ROOT", tmp_path), ("LESSONS", tmp_path / "lessons"),
                       ("NOTEBOOKS", tmp_path / "notebooks")):  # fmt: skip
        monkeypatch.setattr(claims_doc, name, path)


def test_docs_claims_is_what_the_source_gives(capsys):
    """The committed page is current: `make claims` rewrites it, `make claims CHECK=1` prints
    the difference (this test's failure shows it)."""
    assert claims_doc.main(["--check"]) == 0, capsys.readouterr().out


def test_the_page_lists_each_claims_sentence_condition_and_branches(tmp_path, monkeypatch):
    made_up_course(tmp_path, monkeypatch)
    text = claims_doc.markdown(claims_doc.course_claims())
    body = text[text.index("## 99_made_up"):]
    assert body == textwrap.dedent("""\
        ## 99_made_up

        1. device 0 held {x} MB
           - checked: `x > 1` when `device == 'cuda'` and `setup.ranks > 1`, `claim_memory()`
           - skipped when not `device == 'cuda'` and `setup.ranks > 1`, `claim_memory()` (no GPU here)
        2. balanced: yes {y}
           - or: balanced: no {y}
           - checked: `y < 1` when `setup.ranks > 1`, `claim_memory()`
        3. first of two {a}
           - skipped when for each `sentence` in `SENTENCES` and `setup.ranks > 1`, `claim_memory()` (not run)
        4. second of two {b}
           - skipped when for each `sentence` in `SENTENCES` and `setup.ranks > 1`, `claim_memory()` (not run)
        5. A beat B by {ratio:.2f}x (spread {ratio_low:.2f}x)
           - compared: `ratio_low > 1`, no difference: `ratio_low <= 1 and ratio_high >= 1` when `setup.ranks > 1`, `claim_speed()`
        6. the cell says {n}
           - checked: `n == 2`, the notebook's cell
        7. no cell calls this {z}
           - checked: `z == 1`, `claim_unreached()`
        """)  # noqa: E501
    assert "7 claims in 1 notebooks." in text
    assert claims_doc.documented_templates(text)["99_made_up"] == {
        "device 0 held {x} MB", "balanced: yes {y}", "balanced: no {y}", "first of two {a}",
        "second of two {b}", "A beat B by {ratio:.2f}x (spread {ratio_low:.2f}x)",
        "the cell says {n}", "no cell calls this {z}"}


def test_a_reworded_claim_needs_only_the_generator(tmp_path, monkeypatch, capsys):
    """Edit a sentence: the check names the stale line; the generator (no kernel) makes the page
    current again."""
    made_up_course(tmp_path, monkeypatch)
    monkeypatch.setattr(claims_doc, "CLAIMS_DOC", tmp_path / "claims.md")
    assert claims_doc.main([]) == 0
    lesson = tmp_path / "lessons" / "nb99.py"
    lesson.write_text(lesson.read_text().replace("device 0 held {x} MB", "device 0 kept {x} MB"))
    capsys.readouterr()
    assert claims_doc.main(["--check"]) == 1
    diff = capsys.readouterr().out
    assert "-1. device 0 held {x} MB" in diff and "+1. device 0 kept {x} MB" in diff
    assert claims_doc.main([]) == 0 and claims_doc.main(["--check"]) == 0


def test_a_sentence_the_source_does_not_fix_is_refused_with_its_line(tmp_path, monkeypatch, capsys):
    lesson = LESSON + '''

def claim_strategy(claims, label):
    claims.check(f"{label} stepped {{ratio:.2f}}x", "ratio > 1", otherwise="n", ratio=2)
'''
    made_up_course(tmp_path, monkeypatch, lesson)
    with pytest.raises(claims_doc.SourceError, match=r"lessons/nb99.py:\d+: .*f-string.*figure"):
        claims_doc.course_claims()
    assert claims_doc.main(["--check"]) == 2
    assert "its varying part a figure" in capsys.readouterr().err
