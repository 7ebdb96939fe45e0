"""docs/claims.md from the source: every claim a notebook can make, without running it.

A claim is made by a call ``claims.check(text, condition, ...)``, ``claims.compare(text, ...)``
or ``claims.skip(text, why=...)``, in a lesson module (coursekit/lessons/nbNN.py) or in a
notebook's cell. This module reads those calls with :mod:`ast`: each claim's sentence as the
lesson writes it (its figures in braces), the condition its run checks, and the branches of the
code it sits in (``if setup.device == "cuda"``: the tier where it is made, or skipped). Claims are
listed in the order the notebook reaches them: its cells in order, each call of a lesson function
followed into the functions that function calls.

A sentence must be known from the source: a string, a name bound to strings (in the function or
the module, several bindings give several sentences), ``+`` of those, a conditional expression,
an item of a tuple. An f-string or a call is refused with its file and line: put the varying part
in a figure (``{strategy}``) instead.

What a run measured is not here: each run writes its own outcomes (build/claims.md, the verify
report) and the last fresh clone's are in its record (.ci/last-fresh-clone.json).

    python -m coursekit.claims_doc           # rewrite docs/claims.md (make claims)
    python -m coursekit.claims_doc --check   # exit 1, printing the difference, if it is stale
"""

from __future__ import annotations

import argparse
import ast
import difflib
import itertools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .claims import SPREAD_HELD, SPREAD_TIE

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "coursekit" / "lessons"
NOTEBOOKS = ROOT / "notebooks"
CLAIMS_DOC = ROOT / "docs" / "claims.md"
KINDS = ("check", "compare", "skip")
DONE = {"check": "checked", "compare": "compared", "skip": "skipped"}
ITEM = re.compile(r"^\d+\. (.*)$")  # a claim's first sentence in the page
VARIANT = re.compile(r"^   - or: (.*)$")  # its other sentences (a branch picks one)


class SourceError(ValueError):
    """A claim whose sentence or condition the source does not fix."""


@dataclass
class Claimed:
    """One template of the course: the calls that make it (a check, a compare, a skip)."""

    sentences: list[str]
    uses: list[str] = field(default_factory=list)  # one line per call: how and when


class Scope:
    """Names bound in a function (assignments, loop variables) over its module's."""

    def __init__(self, node: ast.AST, outer: Scope | None = None, where: str = ""):
        self.outer, self.where, self.bindings = outer, where, {}
        body = node.body if isinstance(node, ast.Module) else [node]
        for statement in body:
            nodes = [statement] if isinstance(node, ast.Module) else ast.walk(statement)
            for child in nodes:
                if isinstance(child, ast.Assign | ast.AnnAssign) and child.value is not None:
                    targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            self.bindings.setdefault(target.id, []).append(("=", child.value))
                elif isinstance(child, ast.For) and isinstance(child.target, ast.Name):
                    self.bindings.setdefault(child.target.id, []).append(("in", child.iter))

    def values(self, node: ast.AST, attributes: dict[str, Scope]) -> list:
        """Every value ``node`` may have: strings, or tuples of them."""
        if isinstance(node, ast.Constant):
            return [node.value]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return [a + b for a, b in itertools.product(self.values(node.left, attributes),
                                                        self.values(node.right, attributes))]
        if isinstance(node, ast.IfExp):
            return self.values(node.body, attributes) + self.values(node.orelse, attributes)
        if isinstance(node, ast.Tuple | ast.List):
            return [tuple(v) for v in itertools.product(*(self.values(e, attributes)
                                                          for e in node.elts))]  # fmt: skip
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return [v[node.slice.value] for v in self.values(node.value, attributes)]
        if isinstance(node, ast.Name):
            return self.lookup(node.id, attributes)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in attributes):  # fmt: skip
            return attributes[node.value.id].lookup(node.attr, attributes)
        raise SourceError(f"{self.where}:{getattr(node, 'lineno', '?')}: "
                          f"{ast.unparse(node)!r} is not known from the source (an f-string or "
                          "a call): make it a template, its varying part a figure")  # fmt: skip

    def loops_over(self, node: ast.AST) -> bool:
        """Whether ``node`` is a loop's variable (each of its values is made in turn)."""
        if not isinstance(node, ast.Name):
            return False
        if node.id not in self.bindings:
            return self.outer is not None and self.outer.loops_over(node)
        return all(how == "in" for how, _ in self.bindings[node.id])

    def lookup(self, name: str, attributes: dict[str, Scope]) -> list:
        if name not in self.bindings:
            if self.outer is None:
                raise SourceError(f"{self.where}: {name!r} is bound nowhere the source shows")
            return self.outer.lookup(name, attributes)
        found = []
        for how, node in self.bindings[name]:
            values = self.values(node, attributes)
            found += [item for v in values for item in v] if how == "in" else values
        return found


def _is_claim(call: ast.Call) -> bool:
    return (isinstance(call.func, ast.Attribute) and call.func.attr in KINDS
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "claims")


def _argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == keyword:
            return k.value
    return call.args[position] if len(call.args) > position else None


def _branches(path: list[ast.AST], call: ast.AST) -> list[str]:
    """The ``if`` tests (and loops) on the way from ``path[0]`` down to ``call``."""
    said = []
    for parent, child in zip(path, [*path[1:], call], strict=True):
        if isinstance(parent, ast.If):
            test = ast.unparse(parent.test)
            if child in parent.body:
                said.append(f"`{test}`")
            elif child in parent.orelse:
                said.append(f"not `{test}`")
        elif isinstance(parent, ast.For) and child in parent.body:
            said.append(f"for each `{ast.unparse(parent.target)}` in `{ast.unparse(parent.iter)}`")
    return said


def _paths(root: ast.AST, targets: set[ast.AST]) -> dict[ast.AST, list[ast.AST]]:
    """Each target node -> its ancestors below ``root`` (root first)."""
    found, stack = {}, [(root, [])]
    while stack:
        node, above = stack.pop()
        for child in ast.iter_child_nodes(node):
            if child in targets:
                found[child] = [*above, node]
            stack.append((child, [*above, node]))
    return found


class Lesson:
    """A lesson module's functions, the claims each makes and the functions each calls."""

    def __init__(self, path: Path):
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.scope = Scope(self.tree, where=str(path.relative_to(ROOT)))
        self.functions = {f.name: f for f in self.tree.body if isinstance(f, ast.FunctionDef)}

    def reached(self, name: str, seen: set[str]) -> list[tuple[ast.Call, list[str], Scope]]:
        """The claim calls ``name()`` makes, then those of the module functions it calls, in
        source order; each with its branches and its scope."""
        if name in seen or name not in self.functions:
            return []
        seen.add(name)
        function = self.functions[name]
        scope = Scope(function, self.scope, self.scope.where)
        calls = sorted([c for c in ast.walk(function) if isinstance(c, ast.Call)],
                       key=lambda c: (c.lineno, c.col_offset))  # fmt: skip
        paths = _paths(function, set(calls))
        made = []
        for call in calls:
            if _is_claim(call):
                made.append((call, [f"in `{name}()`", *_branches(paths[call][1:], call)], scope))
            elif isinstance(call.func, ast.Name):
                made += self.reached(call.func.id, seen)
        return made


def _use(call: ast.Call, branches: list[str], scope: Scope, attributes: dict) -> str:
    kind = call.func.attr
    when = (" when " + " and ".join(b for b in branches if not b.startswith("in `"))
            if any(not b.startswith("in `") for b in branches) else "")  # fmt: skip
    where = next((b[3:] for b in branches if b.startswith("in `")), "the notebook's cell")
    if kind == "skip":
        why = _argument(call, 99, "why")
        said = f" ({why.value})" if isinstance(why, ast.Constant) else ""
        return f"   - skipped{when}, {where}{said}"
    if kind == "compare":
        condition = f"`{SPREAD_HELD}`, no difference: `{SPREAD_TIE}`"
    else:
        conditions = scope.values(_argument(call, 1, "condition"), attributes)
        condition = " or ".join(f"`{c}`" for c in dict.fromkeys(conditions))
        tie = _argument(call, 99, "tie_condition")
        if tie is not None:
            condition += ", no difference: " + " or ".join(
                f"`{c}`" for c in dict.fromkeys(scope.values(tie, attributes)))
    return f"   - {DONE[kind]}: {condition}{when}, {where}"


def notebook_claims(notebook: Path) -> list[Claimed]:
    """The claims ``notebook`` can make, in the order it reaches them."""
    lesson = Lesson(LESSONS / f"nb{notebook.name[:2]}.py")
    attributes = {"lesson": lesson.scope}
    found: dict[tuple, Claimed] = {}

    def keep(call: ast.Call, branches: list[str], scope: Scope) -> None:
        sentences = list(dict.fromkeys(scope.values(call.args[0], attributes)))
        use = _use(call, branches, scope, attributes)
        # a loop over sentences makes one claim per item; else a branch picks one of them
        for group in [[s] for s in sentences] if scope.loops_over(call.args[0]) else [sentences]:
            found.setdefault(tuple(group), Claimed(group)).uses.append(use)

    seen: set[str] = set()
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    for k, cell in enumerate(cells):
        if cell.source.startswith("%%"):  # a %%writefile cell: a launcher, no claims
            continue
        tree = ast.parse("\n".join(line for line in cell.source.splitlines()
                                   if not line.startswith(("%", "!"))))  # fmt: skip
        cell_scope = Scope(tree, where=f"{notebook.name} code cell {k}")
        calls = sorted([c for c in ast.walk(tree) if isinstance(c, ast.Call)],
                       key=lambda c: (c.lineno, c.col_offset))  # fmt: skip
        paths = _paths(tree, set(calls))
        for call in calls:
            branches = _branches(paths[call][1:], call)
            if _is_claim(call):
                keep(call, branches, cell_scope)
            elif (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                  and call.func.value.id == "lesson"):  # fmt: skip
                for made, inner, scope in lesson.reached(call.func.attr, seen):
                    keep(made, [*inner, *branches], scope)
    for name in lesson.functions:  # a claim no cell reaches is still one the course can make
        for made, inner, scope in lesson.reached(name, seen):
            keep(made, inner, scope)
    return list(found.values())


def course_claims() -> dict[str, list[Claimed]]:
    """Notebook stem -> its claims, for every notebook of the course."""
    return {nb.stem: notebook_claims(nb) for nb in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))}


def markdown(claims: dict[str, list[Claimed]]) -> str:
    total = sum(len(c) for c in claims.values())
    lines = ["# Every claim of the course", "",
             "Generated from the source by `make claims` (coursekit/claims_doc.py), with no "
             "notebook run: "
             "each claim's sentence as its notebook writes it (figures in braces), the condition "
             "its run checks (a comparison holds when the ratio's whole measured spread lies "
             "above 1), and the function and branches that make or skip it. What a run measured "
             "is in that run's report (build/claims.md after `make verify`); the last fresh "
             "clone's outcomes are in .ci/last-fresh-clone.json.", "",
             f"{total} claims in {len(claims)} notebooks.", ""]  # fmt: skip
    for notebook, made in claims.items():
        lines += [f"## {notebook}", ""]
        for k, claimed in enumerate(made, start=1):
            lines.append(f"{k}. {claimed.sentences[0]}")
            lines += [f"   - or: {s}" for s in claimed.sentences[1:]]
            lines += claimed.uses
        lines.append("")
    return "\n".join(lines)


def documented_templates(text: str) -> dict[str, set[str]]:
    """Notebook -> the claim sentences (templates) a page made by :func:`markdown` lists."""
    found: dict[str, set[str]] = {}
    notebook = None
    for line in text.splitlines():
        if line.startswith("## "):
            notebook = line[3:].strip()
            found[notebook] = set()
        elif notebook and (match := ITEM.match(line) or VARIANT.match(line)):
            found[notebook].add(match.group(1))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 printing the difference if docs/claims.md "
                             "is not what the source gives")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        text = markdown(course_claims()) + "\n"
    except SourceError as err:
        print(f"claims_doc: {err}", file=sys.stderr)
        return 2
    current = CLAIMS_DOC.read_text() if CLAIMS_DOC.exists() else ""
    if not args.check:
        if text != current:
            CLAIMS_DOC.write_text(text)
        print(f"{CLAIMS_DOC.relative_to(ROOT)}: {'rewritten' if text != current else 'current'}")
        return 0
    if text == current:
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        current.splitlines(keepends=True), text.splitlines(keepends=True),
        "docs/claims.md (committed)", "docs/claims.md (from the source: make claims)"))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
