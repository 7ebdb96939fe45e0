"""The claims helper: a measured sentence is decided by its figures, both ways."""

import json

import pytest

import coursekit
from coursekit.verify import NotebookReport, claims_summary


def test_a_claim_that_holds_shows_its_sentence_and_figures():
    c = coursekit.claim("DDP ran {ratio:.2f}x faster than DP", "ratio > 1",
                        otherwise="DP ran {ratio:.2f}x DDP's speed here", ratio=1.5)
    assert c.held is True and c.text == "DDP ran 1.50x faster than DP"
    assert c.describe().startswith("✔ DDP ran 1.50x faster than DP (ratio = 1.5)")


def test_a_claim_that_fails_shows_what_is_true_here_instead():
    c = coursekit.claim("DDP ran {ratio:.2f}x faster than DP", "ratio > 1",
                        otherwise="DP ran {ratio:.2f}x DDP's speed here", ratio=0.8)
    assert c.held is False
    shown = c.describe()
    assert "not on this machine: DDP ran 0.80x faster than DP" in shown
    assert "What is true here: DP ran 0.80x DDP's speed here" in shown


def test_conditions_compare_figures_with_numbers_and_with_each_other():
    figures = {"a": 2.0, "b": 3, "ok": True}
    assert coursekit.evaluate("a < b and b <= 3 and ok == True", figures) is True
    assert coursekit.evaluate("a >= b", figures) is False
    assert coursekit.evaluate("a != 2", figures) is False
    assert coursekit.evaluate("b <= 1.5 * a and b > 2 * a", figures) is False
    assert coursekit.evaluate("b <= 1.5 * a", figures) is True
    with pytest.raises(KeyError, match="'c', which is not a figure"):
        coursekit.evaluate("a < c", figures)
    with pytest.raises(ValueError, match="not 'name OP value'"):
        coursekit.evaluate("a << b", figures)


def test_the_branch_not_taken_is_filled_in_too():
    """A typo in the sentence for the other kind of machine fails here, not in class."""
    with pytest.raises(ValueError, match="do not fit its figures"):
        coursekit.claim("{x} is large", "x > 1", otherwise="{y} is what it is", x=2)


def test_figures_must_be_finite_flat_values():
    with pytest.raises(ValueError, match="finite"):
        coursekit.claim("x", "x > 1", otherwise="y", x=float("nan"))
    with pytest.raises(TypeError, match="number, string or bool"):
        coursekit.claim("x", "x > 1", otherwise="y", x=[1, 2])


def test_results_files_carry_the_claims_and_verify_lists_those_not_held(setup):
    claims = coursekit.Claims()
    claims.check("A beats B", "a > b", otherwise="B beats A here", a=1, b=2)
    claims.check("A is positive", "a > 0", otherwise="A is not positive", a=1)
    path = coursekit.save_results("99_test", {"a": 1}, setup, claims=claims)
    record = json.loads(path.read_text())
    assert [c["held"] for c in record["claims"]] == [False, True]
    assert record["claims"][0]["figures"] == {"a": 1, "b": 2}
    report = NotebookReport("99_test", claims=record["claims"])
    summary = claims_summary([report])
    assert "1 of 2 held" in summary and "NOT HERE: A beats B" in summary
    assert "true here: B beats A here" in summary


def test_a_figure_cannot_take_the_name_of_the_claims(setup):
    with pytest.raises(ValueError, match="'claims'"):
        coursekit.save_results("99_test", {"claims": 1}, setup)
