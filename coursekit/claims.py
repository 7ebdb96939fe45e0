"""Claims: the sentences of a lesson that state a measured outcome, checked by the run itself.

A claim is a sentence ("DDP ran 1.5x faster than DataParallel"), the figures it rests on,
and a condition over those figures ("ddp_over_dp > 1"). The run decides whether it held
on this machine; where it did not, the notebook shows the sentence that is true here
instead (``otherwise``), and says why. Both sentences are templates filled in from the
figures (``{speedup:.2f}``), and both are filled in on every run, so a typo in the branch
this machine does not take still fails here, not on the class server.

    claims = coursekit.Claims()
    claims.check("DDP ran {ratio:.2f}x faster than DP", "ratio > 1", ratio=dp_ms / ddp_ms,
                 otherwise="DP ran {ratio:.2f}x DDP's speed here: ... (the reason)")
    ...
    claims.show()                                     # the closing "What you saw"
    coursekit.save_results(stem, figures, setup, claims=claims)

A condition is one or more comparisons joined by ``and``: ``name OP value``, where OP is
one of < <= > >= == != and value is a number, another figure's name, or a number times a
figure's name (``ddp <= 2 * floor``). That is all a
results file needs to let anyone re-check a claim from its figures (:func:`evaluate`).
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from dataclasses import asdict, dataclass

OPERATORS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
             "<": operator.lt, ">": operator.gt}  # fmt: skip
_COMPARISON = re.compile(
    r"^\s*([A-Za-z_]\w*)\s*(<=|>=|==|!=|<|>)\s*(?:([0-9.eE+-]+)\s*\*\s*)?(\S+)\s*$"
)


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


def _figure(name: str, value: object) -> object:
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, numbers.Number):
        value = value.item() if hasattr(value, "item") else value  # numpy / torch scalars
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"figure {name!r} is {value}: a claim rests on finite numbers")
        return value
    raise TypeError(f"figure {name!r} is a {type(value).__name__}: use a number, string or bool")


def _shown(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


@dataclass
class Claim:
    text: str  # the sentence, filled in from the figures
    condition: str  # what must hold for the sentence to be true
    held: bool
    figures: dict
    otherwise: str = ""  # the sentence that is true here when it did not hold, and why

    def describe(self, markdown: bool = False) -> str:
        """The sentence true on this machine, with its figures."""
        tick = "`" if markdown else ""  # figure names as code: their underscores stay
        figures = ", ".join(f"{tick}{k} = {_shown(v)}{tick}" for k, v in self.figures.items())
        if self.held:
            return f"✔ {self.text} ({figures})"
        return (f"✘ not on this machine: {self.text}. What is true here: "
                f"{self.otherwise or 'see the figures'} ({figures})")  # fmt: skip

    def as_record(self) -> dict:
        return asdict(self)

    def _ipython_display_(self) -> None:
        """Nothing: ``Claims.check`` printed the claim already (a cell ending in a check
        would show it twice)."""


def claim(text: str, condition: str, otherwise: str = "", **figures) -> Claim:
    """A claim over ``figures``: both sentences filled in, the condition evaluated."""
    figures = {name: _figure(name, value) for name, value in figures.items()}
    try:
        filled, filled_otherwise = text.format(**figures), otherwise.format(**figures)
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"claim {text!r}: its sentences do not fit its figures "
                         f"({', '.join(figures)}): {err!r}") from err  # fmt: skip
    return Claim(filled, condition, evaluate(condition, figures), figures, filled_otherwise)


class Claims(list):
    """A notebook's claims, in the order the lesson makes them."""

    def check(self, text: str, condition: str, otherwise: str = "", **figures) -> Claim:
        """Make a claim, show it with its figures where it is made, and keep it."""
        made = claim(text, condition, otherwise, **figures)
        self.append(made)
        print(made.describe())
        return made

    @property
    def not_held(self) -> list[Claim]:
        return [c for c in self if not c.held]

    def show(self) -> None:
        """Every claim of the lesson as it came out on this machine: the "What you saw"."""
        held = sum(c.held for c in self)
        lines = [f"- {c.describe(markdown=True)}" for c in self]
        summary = f"{held} of {len(self)} claims held on this machine"
        if self.not_held:
            summary += "; where one did not, the sentence after 'What is true here' is this run's"
        try:
            from IPython.display import Markdown, display

            display(Markdown(f"**{summary}.**\n\n" + "\n".join(lines)))
        except ImportError:  # outside Jupyter: plain text
            print(summary + "\n" + "\n".join(f"- {c.describe()}" for c in self))
