"""The claims helper: a measured sentence is decided by its figures, both ways."""

import json

import pytest

import coursekit
from coursekit.claims import claims_markdown
from coursekit.verify import NotebookReport, claims_summary


def test_a_claim_that_holds_shows_its_sentence_on_one_line():
    c = coursekit.claim("DDP ran {ratio:.2f}x faster than DP", "ratio > 1",
                        otherwise="DP ran {ratio:.2f}x DDP's speed here", ratio=1.5)
    assert c.held is True and c.outcome == "held" and c.text == "DDP ran 1.50x faster than DP"
    assert c.describe() == "✔ DDP ran 1.50x faster than DP"


def test_a_claim_that_fails_shows_what_is_true_here_first():
    c = coursekit.claim("DDP ran {ratio:.2f}x faster than DP", "ratio > 1",
                        otherwise="DP ran {ratio:.2f}x DDP's speed here", ratio=0.8)
    assert c.held is False and c.outcome == "not held"
    assert c.describe() == ("✘ DP ran 0.80x DDP's speed here "
                            "(the lesson expected: DDP ran over 1.00x faster than DP)")


@pytest.mark.parametrize(("template", "condition", "figures", "expected"), [
    ("the worst ended at {worst:.2f}x its first loss on {n} ranks", "worst < 0.5",
     {"worst": 0.7, "n": 2}, "the worst ended at under 0.50x its first loss on 2 ranks"),
    ("{after} of {before} tensors differed", "after == 0 and before > 0", {"after": 3, "before": 4},
     "0 of over 0 tensors differed"),
    ("the calculator is within {err:.1%}", "err < 0.1", {"err": 0.2},
     "the calculator is within 10.0%"),
    ("{garbled} of {n} lines were garbled", "garbled >= 1", {"garbled": 0, "n": 400},
     "at least 1 of 400 lines were garbled"),
    ("the state ({state:.1f} MB) outweighs the outputs ({out:.1f} MB)", "state > out",
     {"state": 2.0, "out": 3.0}, "the state (over 3.0 MB) outweighs the outputs (3.0 MB)"),
])  # fmt: skip
def test_a_claim_that_fails_states_its_expectation_without_blanks(template, condition, figures,
                                                                   expected):
    """The lesson's sentence with each tested figure as the bound it had to meet: never "…",
    never this run's figure (which would make the expectation say what did not happen)."""
    c = coursekit.claim(template, condition, otherwise="not here", **figures)
    assert c.outcome == "not held" and c.expected() == expected and "…" not in c.describe()


def test_a_claim_may_state_its_expectation_itself():
    c = coursekit.claim("{k} threads beat {n} ranks by {ratio:.2f}x", "ratio > 1", otherwise="no",
                        expect="one process with every core beats {n} ranks", k=2, n=2, ratio=0.7)
    assert c.describe() == "✘ no (the lesson expected: one process with every core beats 2 ranks)"


def ms(*values):
    return [v / 1000 for v in values]


def test_a_planted_tie_is_no_measurable_difference():
    """Medians 1 % apart with rounds that cross: neither side won (notebook 07's race)."""
    claims = coursekit.Claims()
    c = claims.compare("DDP stepped {ratio:.2f}x faster", less=ms(28.2, 28.9, 27.9, 28.4),
                       more=ms(28.5, 28.1, 28.6, 28.6), otherwise="mine stepped faster",
                       tie="no measurable difference: {ratio_low:.2f}x to {ratio_high:.2f}x")
    assert c.outcome == "no difference" and c.held is False
    assert c.describe().startswith("≈ no measurable difference: 0.97x to 1.03x")
    assert coursekit.outcome_of(c.as_record()) == "no difference"


def test_a_comparison_outside_its_spread_holds_or_does_not():
    kwargs = {"otherwise": "B was faster ({ratio:.2f}x)", "tie": "even"}
    faster = coursekit.Claims().compare("A was {ratio:.2f}x faster", less=ms(10, 11, 10.5),
                                        more=ms(15, 16, 15.5), **kwargs)
    assert faster.outcome == "held" and faster.text == "A was 1.48x faster"
    slower = coursekit.Claims().compare("A was {ratio:.2f}x faster", less=ms(15, 16, 15.5),
                                        more=ms(10, 11, 10.5), **kwargs)
    assert slower.outcome == "not held" and slower.sentence() == "B was faster (0.68x)"


def test_unpaired_measurements_compare_their_quartiles():
    # medians 10.5 vs 12.5, but the quartiles overlap: no difference
    wide = coursekit.spread([8, 9, 10, 11, 13, 14], [9, 10, 12, 13, 14, 15], paired=False)
    assert wide["ratio"] == pytest.approx(12.5 / 10.5)
    assert wide["ratio_low"] < 1 < wide["ratio_high"]
    narrow = coursekit.spread([9.9, 10, 10, 10.1], [11.9, 12, 12, 12.1], paired=False)
    assert narrow["ratio_low"] > 1  # the quartiles apart: a result


def test_a_comparison_needs_a_spread_and_its_own_figure_names():
    with pytest.raises(ValueError, match="less= has 1 measurement"):
        coursekit.spread([1.0], [2.0, 2.1])
    with pytest.raises(ValueError, match="as many rounds"):
        coursekit.spread([1.0, 1.1], [2.0, 2.1, 2.2])
    with pytest.raises(ValueError, match="ratio are its own figures"):
        coursekit.Claims().compare("x", [1, 2], [3, 4], otherwise="y", tie="z", ratio=2)


def test_a_skipped_claim_is_not_false_and_has_no_figures():
    claims = coursekit.Claims()
    c = claims.skip("Slurm ran the sbatch script on 2 nodes", why="no Slurm on this machine")
    assert c.outcome == "skipped" and c.figures == {} and c.held is False
    assert c.describe() == ("– not run here: Slurm ran the sbatch script on 2 nodes: "
                            "no Slurm on this machine")
    assert coursekit.outcome_of(c.as_record()) == "skipped"
    with pytest.raises(ValueError, match="why="):
        claims.skip("x", why="")
    assert claims.summary() == {"held": 0, "not held": 0, "no difference": 0, "skipped": 1}


def test_a_skipped_claim_keeps_the_template_its_run_would_have_checked():
    """docs/claims.md lists one sentence whether the run happened or not; the learner reads a
    plain sentence of what it would measure, never the template's blanks."""
    template = "Slurm ran on {nodes} nodes x {per_node} rank(s): {state}, world size {world:d}"
    with pytest.raises(ValueError, match="its figures state, world come from the run.*expect="):
        coursekit.Claims().skip(template, why="no Slurm here", nodes=2, per_node=2)
    c = coursekit.Claims().skip(template, why="no Slurm here", nodes=2, per_node=2,
                                expect="Slurm would run it on {nodes} nodes and report its state")
    assert c.template == template and c.figures == {}
    assert c.describe() == ("– not run here: Slurm would run it on 2 nodes and report its state: "
                            "no Slurm here")
    made = coursekit.Claims().check(template, "world == 4", nodes=2, per_node=2, state="COMPLETED",
                                    world=4, otherwise="no")
    assert made.template == c.template


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
    claims.compare("C beats D", less=[1, 1.2], more=[1.1, 1.1], otherwise="D", tie="C ties D")
    claims.skip("E ran", why="no E here")
    path = coursekit.save_results("99_test", {"a": 1}, setup, claims=claims)
    record = json.loads(path.read_text())
    assert [c["outcome"] for c in record["claims"]] == ["not held", "held", "no difference",
                                                         "skipped"]  # fmt: skip
    assert record["claims"][0]["figures"] == {"a": 1, "b": 2}
    report = NotebookReport("99_test", claims=record["claims"])
    summary = claims_summary([report])
    assert "claims: 4: 1 held, 1 not held, 1 no difference, 1 skipped" in summary
    assert "NOT HERE: A beats B" in summary and "true here: B beats A here" in summary
    assert "NO DIFFERENCE HERE: C beats D" in summary and "true here: C ties D" in summary
    assert "NOT RUN HERE: E ran" in summary and "why: no E here" in summary


def test_a_figure_cannot_take_the_name_of_the_claims(setup):
    with pytest.raises(ValueError, match="'claims'"):
        coursekit.save_results("99_test", {"claims": 1}, setup)


def test_a_runs_claims_report_lists_every_claim_with_its_template_and_outcome(setup):
    """build/claims.md: each claim as its notebook writes it (figures in braces), its
    condition and what the run measured."""
    claims = coursekit.Claims()
    claims.check("the loss fell to {loss:.2f}", "loss < 1", otherwise="it stayed at {loss:.2f}",
                 loss=0.25)
    claims.compare("C beats D", less=[1, 1.2], more=[1.1, 1.1], otherwise="D", tie="C ties D")
    claims.skip("E ran on {n} nodes", why="no E here", expect="E would run on several nodes")
    records = json.loads(coursekit.save_results("99_test", {}, setup, claims=claims).read_text())
    text = claims_markdown({"99_test": records["claims"]}, "made by a test")
    assert "3 claims: 1 held, 0 not held, 1 no difference, 1 skipped." in text
    assert "1. **✔ held.** the loss fell to {loss:.2f}" in text
    assert "   - there: the loss fell to 0.25" in text and "   - figures: loss=0.25" in text
    assert "2. **≈ no difference.** C beats D" in text and "   - there: C ties D" in text
    assert "3. **– skipped.** E ran on {n} nodes" in text and "not run there: no E here" in text
