"""Claims: the sentences of a lesson that state a measured outcome, checked by the run itself.

A claim is a sentence ("DDP ran 1.5x faster than DataParallel"), the figures it rests on,
and a condition over those figures ("ddp_over_dp > 1"). The run decides its outcome on this
machine, one of four, each with its own sentence:

- held: the sentence (``text``) is true here;
- not held: ``otherwise`` is what is true here, and says why (a cause only as a figure of
  the run, or named as a likely reason not measured here);
- no difference: a comparison whose ratio lies inside the spread the run measured
  (``tie``): neither side won on this machine;
- skipped: the run it rests on could not happen here (no Slurm, one GPU); ``why`` says
  what was not run. A skipped claim is not false and has no figures.

Every sentence is a template filled in from the figures (``{ratio:.2f}``) on every run, so a
typo in the branch this machine does not take still fails here, not on the class server.

    claims = coursekit.Claims()
    claims.check("the loss fell to {loss:.2f}", "loss < 1", otherwise="it stayed at {loss:.2f}",
                 loss=final_loss)
    claims.compare("DDP stepped {ratio:.2f}x faster than DP", less=ddp_times, more=dp_times,
                   otherwise="DP stepped faster here", tie="DDP and DP stepped alike here")
    claims.skip("Slurm ran the sbatch script on 2 nodes", why="no Slurm on this machine")
    claims.show()                                     # the closing "What you saw": a table
    coursekit.save_results(stem, figures, setup, claims=claims)

A condition is one or more comparisons joined by ``and``: ``name OP value``, where OP is
one of < <= > >= == != and value is a number, another figure's name, or a number times a
figure's name (``ddp <= 2 * floor``). That is all a results file needs to let anyone
re-check a claim from its figures (:func:`outcome_of`).
"""

from __future__ import annotations

import math
import numbers
import operator
import re
import statistics
from dataclasses import asdict, dataclass

OPERATORS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
             "<": operator.lt, ">": operator.gt}  # fmt: skip
_COMPARISON = re.compile(
    r"^\s*([A-Za-z_]\w*)\s*(<=|>=|==|!=|<|>)\s*(?:([0-9.eE+-]+)\s*\*\s*)?(\S+)\s*$"
)
HELD, NOT_HELD, NO_DIFFERENCE, SKIPPED = "held", "not held", "no difference", "skipped"
OUTCOMES = (HELD, NOT_HELD, NO_DIFFERENCE, SKIPPED)
MARKS = {HELD: "✔", NOT_HELD: "✘", NO_DIFFERENCE: "≈", SKIPPED: "–"}
# a comparison's figures: the ratio of medians (more / less) and the spread around it
SPREAD_HELD, SPREAD_TIE = "ratio_low > 1", "ratio_low <= 1 and ratio_high >= 1"


def _operand(token: str, figures: dict, condition: str) -> object:
    if token in ("True", "False"):
        return token == "True"
    if re.fullmatch(r"[A-Za-z_]\w*", token):
        if token not in figures:
            raise KeyError(f"condition {condition!r} names {token!r}, which is not a figure "
                           f"of this claim (figures: {', '.join(figures) or 'none'})")  # fmt: skip
        return figures[token]
    return float(token)


def evaluate(condition: str, figures: dict) -> bool:
    """Whether ``condition`` holds for ``figures``: comparisons joined by ``and``."""
    held = True
    for part in condition.split(" and "):
        match = _COMPARISON.match(part)
        if not match:
            raise ValueError(f"condition {condition!r}: {part.strip()!r} is not 'name OP value' "
                             "(value: a number, a figure's name, or NUMBER * name) "
                             f"with OP one of {' '.join(OPERATORS)}")  # fmt: skip
        left, op, factor, right = match.groups()
        value = _operand(right, figures, condition)
        if factor is not None:
            value = float(factor) * value
        held &= bool(OPERATORS[op](_operand(left, figures, condition), value))
    return held


def outcome_of(record: dict) -> str:
    """A claim's outcome re-decided from its recorded condition and figures alone."""
    if record.get("outcome") == SKIPPED:
        return SKIPPED
    if evaluate(record["condition"], record["figures"]):
        return HELD
    tie_condition = record.get("tie_condition")
    if tie_condition and evaluate(tie_condition, record["figures"]):
        return NO_DIFFERENCE
    return NOT_HELD


def _figure(name: str, value: object) -> object:
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, numbers.Number):
        value = value.item() if hasattr(value, "item") else value  # numpy / torch scalars
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"figure {name!r} is {value}: a claim rests on finite numbers")
        return value
    raise TypeError(f"figure {name!r} is a {type(value).__name__}: use a number, string or bool")


_BOUND_WORDS = {"<": "under ", "<=": "at most ", ">": "over ", ">=": "at least ", "==": "",
                "!=": "other than "}  # fmt: skip
_SPREAD_FIGURES = ("ratio", "ratio_low", "ratio_high")


def _bounds(condition: str, figures: dict) -> dict[str, list[tuple[str, object]]]:
    """Figure name -> the bounds ``condition`` sets on it: [(word, value)], e.g. [("under ", 0.5)].
    A comparison's held condition (its spread above 1) bounds the ratio and its spread."""
    if condition == SPREAD_HELD:
        return {name: [("over ", 1.0)] for name in _SPREAD_FIGURES}
    found: dict[str, list[tuple[str, object]]] = {}
    for part in condition.split(" and ") if condition else []:
        match = _COMPARISON.match(part)
        if not match:
            continue
        left, op, factor, right = match.groups()
        value = _operand(right, figures, condition)
        if factor is not None:
            value = float(factor) * value
        elif re.fullmatch(r"-?\d+", right):
            value = int(right)  # a count's bound reads as a count
        found.setdefault(left, []).append((_BOUND_WORDS[op], value))
    return found


def _formatted(value: object, spec: str | None) -> str:
    try:
        return format(value, spec or "")
    except (TypeError, ValueError):
        return str(value)


@dataclass
class Claim:
    text: str  # the sentence the lesson expects, filled in from the figures
    condition: str  # what must hold for ``text`` to be true
    held: bool  # outcome == HELD
    figures: dict
    otherwise: str = ""  # the sentence that is true here when it did not hold, and why
    outcome: str = HELD
    tie_condition: str = ""  # a comparison: its ratio inside the measured spread
    tie: str = ""  # the sentence when it was a tie
    why_skipped: str = ""  # a skipped claim: what was not run here, and why
    template: str = ""  # ``text`` before its figures were filled in (docs/claims.md lists it)
    expect: str = ""  # the lesson's expectation as a plain sentence, where the template's is not

    def sentence(self) -> str:
        """The sentence true on this machine."""
        return {HELD: self.text, NOT_HELD: self.otherwise or "see the figures",
                NO_DIFFERENCE: self.tie, SKIPPED: self.why_skipped}[self.outcome]  # fmt: skip

    def describe(self) -> str:
        """One line: the outcome's mark, the sentence true here, then what the lesson expected
        where that is another sentence."""
        if self.outcome == HELD:
            return f"{MARKS[HELD]} {self.text}"
        if self.outcome == SKIPPED:
            return f"{MARKS[SKIPPED]} not run here: {self.text}: {self.why_skipped}"
        return f"{MARKS[self.outcome]} {self.sentence()} (the lesson expected: {self.expected()})"

    def expected(self) -> str:
        """What the lesson expected, as a plain sentence with no blank: ``expect`` where the
        claim gives one; else its sentence with each figure the condition tests written as the
        bound it had to meet ("the worst ended at under 0.50x its first loss", "DDP stepped over
        1.00x faster"), the other figures (sizes, counts) as measured."""
        if self.expect:
            return self.expect
        if not self.template:
            return self.text
        bounds = _bounds(self.condition, self.figures)

        def fill(field: re.Match) -> str:
            name, spec = re.match(r"([A-Za-z_]\w*)[^:]*(?::(.*))?$", field.group(1)).groups()
            if name not in bounds:
                return field.group(0).format(**self.figures)
            return " and ".join(f"{word}{_formatted(value, spec)}" for word, value in bounds[name])

        said = re.sub(r"\{([^{}]*)\}", fill, self.template)
        # "within 10%", not "within under 10%"
        return re.sub(r"\b(within|at most) (under|at most) ", r"\1 ", said)

    def as_record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict) -> Claim:
        """A claim as a results file has it, its outcome re-decided from its figures."""
        outcome = outcome_of(record)
        return cls(**{**record, "outcome": outcome, "held": outcome == HELD})

    def _ipython_display_(self) -> None:
        """Nothing: ``Claims.check`` printed the claim already (a cell ending in a check
        would show it twice)."""


def claim(text: str, condition: str, otherwise: str = "", tie_condition: str = "",
          tie: str = "", expect: str = "", **figures) -> Claim:  # fmt: skip
    """A claim over ``figures``: every sentence filled in, the conditions evaluated."""
    if bool(tie) != bool(tie_condition):
        raise ValueError(f"claim {text!r}: a tie needs both its sentence (tie=) and its "
                         "condition (tie_condition=)")  # fmt: skip
    figures = {name: _figure(name, value) for name, value in figures.items()}
    try:
        filled = [s.format(**figures) for s in (text, otherwise, tie, expect)]
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"claim {text!r}: its sentences do not fit its figures "
                         f"({', '.join(figures)}): {err!r}") from err  # fmt: skip
    made = Claim(filled[0], condition, False, figures, filled[1], NOT_HELD, tie_condition,
                 filled[2], template=text, expect=filled[3])  # fmt: skip
    made.outcome = outcome_of(made.as_record())
    made.held = made.outcome == HELD
    return made


def _samples(name: str, values) -> list[float]:
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"{name}= has {len(values)} measurement(s): a comparison needs the "
                         "spread of at least 2 (measure rounds or repeats)")  # fmt: skip
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}= must be positive finite measurements, got {values}")
    return values


def spread(less, more, paired: bool = True) -> dict:
    """How much larger ``more`` is than ``less``: the ratio of medians and its spread.

    Paired (round k of each side measured together, as interleaved rounds are): the smallest
    and largest per-round ratio. Unpaired: the quartiles of one side against the other's
    (the extremes where a side has fewer than 4 measurements)."""
    less, more = _samples("less", less), _samples("more", more)
    if paired:
        if len(less) != len(more):
            raise ValueError(f"paired=True needs as many rounds of less= ({len(less)}) as of "
                             f"more= ({len(more)}); pass paired=False otherwise")  # fmt: skip
        ratios = [after / before for before, after in zip(less, more, strict=True)]
        low, high = min(ratios), max(ratios)
    else:

        def bounds(values):
            if len(values) < 4:
                return min(values), max(values)
            q1, _, q3 = statistics.quantiles(values, n=4)
            return q1, q3

        (less_lo, less_hi), (more_lo, more_hi) = bounds(less), bounds(more)
        low, high = more_lo / less_hi, more_hi / less_lo
    ratio = statistics.median(more) / statistics.median(less)
    return {"ratio": ratio, "ratio_low": low, "ratio_high": high,
            "less_median": statistics.median(less), "more_median": statistics.median(more),
            "measurements": min(len(less), len(more))}  # fmt: skip


class Claims(list):
    """A notebook's claims, in the order the lesson makes them."""

    def _keep(self, made: Claim) -> Claim:
        self.append(made)
        print(made.describe())
        return made

    def check(self, text: str, condition: str, otherwise: str = "", expect: str = "",
              tie_condition: str = "", tie: str = "", **figures) -> Claim:  # fmt: skip
        """Make a claim, show it where it is made (one line), and keep it. ``expect``: the
        lesson's expectation in a plain sentence, where :meth:`Claim.expected`'s reading of the
        sentence and its condition would not say it well. ``tie_condition`` and ``tie``: a
        claim over several spreads (see :meth:`compare`) says when none of its sides won."""
        return self._keep(claim(text, condition, otherwise, tie_condition, tie, expect,
                                **figures))  # fmt: skip

    def compare(self, text: str, less, more, otherwise: str, tie: str, paired: bool = True,
                expect: str = "", **figures) -> Claim:  # fmt: skip
        """Claim that the measurements ``less`` are smaller than ``more`` (times: ``less`` is
        the side expected faster), outside the spread the run measured.

        The sentences may use ``ratio`` (median of more / median of less), ``ratio_low`` and
        ``ratio_high`` (its spread, see :func:`spread`), ``less_median``, ``more_median``,
        ``measurements``, and ``figures``. Held: every ratio of the spread above 1; no
        difference: the spread includes 1 (``tie``); not held: every ratio below 1."""
        measured = spread(less, more, paired)
        clash = set(measured) & set(figures)
        if clash:
            raise ValueError(f"compare(): {', '.join(sorted(clash))} are its own figures")
        return self._keep(claim(text, SPREAD_HELD, otherwise, SPREAD_TIE, tie, expect,
                                **measured, **figures))  # fmt: skip

    def skip(self, text: str, why: str, expect: str = "", **shown) -> Claim:
        """A claim whose run could not happen here: ``text`` says what the lesson would have
        claimed, ``why`` what was not run and why. No figures: nothing was measured.

        ``text`` may be the template the run would have checked, so that docs/claims.md lists
        one sentence for both: ``shown`` fills the fields known without the run (``nodes=2``);
        where fields stay that only the run would fill, ``expect`` says in a plain sentence
        what it would have measured (never a sentence with blanks)."""
        if not why:
            raise ValueError(f"skip({text!r}): say why= it could not be run here")
        unknown = sorted({re.split(r"[:!.\[]", f, maxsplit=1)[0]
                          for f in re.findall(r"\{([^{}]*)\}", text)} - set(shown))  # fmt: skip
        if unknown and not expect:
            raise ValueError(f"skip({text!r}): its figures {', '.join(unknown)} come from the run "
                             "that did not happen: pass expect= (what it would measure, a plain "
                             "sentence) or their values")  # fmt: skip
        said = expect.format(**shown) if unknown else text.format(**shown)
        return self._keep(Claim(said, "", False, {}, outcome=SKIPPED, why_skipped=why,
                                template=text, expect=expect))  # fmt: skip

    def summary(self) -> dict:
        """How many claims came out each way."""
        return {outcome: sum(c.outcome == outcome for c in self) for outcome in OUTCOMES}

    def show(self) -> None:
        """The closing "What you saw": the claims counted by outcome (each was printed, one
        line, where the lesson made it)."""
        counts = self.summary()
        rows = [f"| {MARKS[o]} {o} | {n} |" for o, n in counts.items()]
        table = "| outcome on this machine | claims |\n|---|---|\n" + "\n".join(rows)
        others = [c for c in self if c.outcome != HELD]
        note = (
            "Every claim of this lesson held here."
            if not others
            else "The lines marked ✘, ≈ or – above say what is true on this machine instead."
        )
        try:
            from IPython.display import Markdown, display

            display(Markdown(f"{table}\n\n{note}"))
        except ImportError:  # outside Jupyter: plain text
            print("\n".join(f"{o}: {n}" for o, n in counts.items()) + "\n" + note)


def _figures_line(figures: dict) -> str:
    shown = []
    for name, value in figures.items():
        if isinstance(value, float):
            value = f"{value:.3g}"
        shown.append(f"{name}={value}")
    return ", ".join(shown)


def claims_markdown(claims_by_notebook: dict[str, list[dict]], heading: str) -> str:
    """Every claim of the course as a reader audits it: per notebook, each claim's sentence as
    the lesson writes it (its figures in braces), the condition the run checks, and what one
    run measured (outcome, the sentence true there, the figures)."""
    counts = {o: 0 for o in OUTCOMES}
    for records in claims_by_notebook.values():
        for record in records:
            counts[outcome_of(record)] += 1
    lines = ["# Every claim of the course", "", heading, "",
             f"{sum(counts.values())} claims: " + ", ".join(f"{n} {o}" for o, n in counts.items())
             + ".", ""]  # fmt: skip
    for notebook, records in claims_by_notebook.items():
        lines += [f"## {notebook}", ""]
        for k, record in enumerate(records, start=1):
            made = Claim.from_record(record)
            lines.append(f"{k}. **{MARKS[made.outcome]} {made.outcome}.** "
                         f"{made.template or made.text}")  # fmt: skip
            if made.outcome == SKIPPED:
                lines.append(f"   - not run there: {made.why_skipped}")
                continue
            lines.append(f"   - condition: `{made.condition}`"
                         + (f"; no difference: `{made.tie_condition}`" if made.tie_condition
                            else ""))  # fmt: skip
            lines.append(f"   - there: {made.sentence()}")
            lines.append(f"   - figures: {_figures_line(made.figures)}")
        lines.append("")
    return "\n".join(lines)
