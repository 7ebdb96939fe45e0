"""The instructor's verify command: execute every notebook headlessly and report.

    python -m coursekit.verify [--smoke] [--nproc N] [--device cpu|cuda] [NOTEBOOK ...]

Runs the notebooks in order with papermill on this machine's tier, saves the executed
copies under build/executed/, prints a summary table (status, seconds, the failing cell
and its error, key figures from the results files) and exits non-zero if any failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# jsonschema (under nbformat) imports rfc3987_syntax when it is installed, which builds a
# grammar for 1.7 s; no notebook here has IRI-formatted fields, so skip that format checker.
sys.modules.setdefault("rfc3987_syntax", None)

import nbformat  # noqa: E402
import papermill  # noqa: E402
from jupyter_client import AsyncKernelManager  # noqa: E402
from jupyter_core.utils import run_sync  # noqa: E402
from tqdm import tqdm  # noqa: E402

from .cells import longest_output  # noqa: E402
from .claims import (  # noqa: E402
    NO_DIFFERENCE,
    NOT_HELD,
    OUTCOMES,
    SKIPPED,
    claims_markdown,
    outcome_of,
)
from .config import ParameterError, check_parameters  # noqa: E402
from .echo import HEADLESS_ENV  # noqa: E402  launches print step lines, not a widget
from .exercises import SOLUTIONS_ENV, TASK_OUTCOMES  # noqa: E402
from .report import hardware, write_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONTEXT_KEYS = {"notebook", "tier", "device", "nproc", "smoke", "claims", "tasks"}


@dataclass
class NotebookReport:
    notebook: str
    status: str = "not run"  # passed | failed | timed out
    seconds: float = 0.0
    failed_cell: int | None = None  # index in the committed notebook
    error: str = ""
    tier: str | None = None  # as the notebook's results file reports it
    figures: dict = field(default_factory=dict)
    claims: list = field(default_factory=list)  # as the results file has them: text, held, ...
    tasks: list = field(default_factory=list)  # the learner's tasks: name, kind, outcome
    longest_output_lines: int = 0  # the most lines one cell printed (coursekit.cells)
    longest_output_cell: int | None = None  # that cell's index in the committed notebook

    def claims_with(self, outcome: str) -> list:
        return [c for c in self.claims if outcome_of(c) == outcome]

    @property
    def claims_not_held(self) -> list:
        return self.claims_with(NOT_HELD)


def select(notebooks_dir: Path, wanted: list[str]) -> list[Path]:
    """All notebooks in course order, or those whose file name starts with one of ``wanted``."""
    everything = sorted(notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if not wanted:
        return everything
    chosen = [nb for nb in everything if any(nb.name.startswith(w) for w in wanted)]
    unknown = [w for w in wanted if not any(nb.name.startswith(w) for nb in everything)]
    if unknown:
        names = ", ".join(nb.stem for nb in everything)
        raise SystemExit(f"no notebook matches {', '.join(unknown)}; there are: {names}")
    return chosen


def _failed_cell(executed: Path) -> int | None:
    """Index, in the committed notebook, of the cell that failed or was cut off."""
    nb = nbformat.read(executed, as_version=4)
    source_index = 0
    for cell in nb.cells:
        if {"injected-parameters", "papermill-error-cell-tag"} & set(cell.metadata.get("tags", [])):
            continue  # papermill added it; the committed notebook has no such cell
        pm = cell.metadata.get("papermill", {})
        if pm.get("exception") or pm.get("status") == "running":
            return source_index
        source_index += 1
    return None


def start_kernel(notebook: Path, sockets_dir: Path) -> AsyncKernelManager:
    """Start the notebook's kernel now: it boots while the previous notebook still runs.

    Async, as nbclient expects: its blocking twin would stall nbclient's event loop and
    with it the cell timeouts.
    """
    # on POSIX a local socket file instead of TCP ports: nothing else on the machine can connect
    ipc = {"transport": "ipc", "ip": str(sockets_dir / notebook.stem)} if os.name == "posix" else {}
    km = AsyncKernelManager(kernel_name="python3", **ipc)
    run_sync(km.start_kernel)(cwd=str(notebook.parent))
    return km


def stop_kernel(km: AsyncKernelManager) -> None:
    run_sync(km.shutdown_kernel)(now=True)


def execute(path: Path, executed: Path, parameters: dict, timeout_s: float,
            km: AsyncKernelManager) -> None:
    """Run a notebook with papermill, as the course does everywhere (verify, the tests): its
    kernel ``km`` (:func:`start_kernel`) in the notebook's folder, the parameters injected, the
    executed copy written to ``executed``. The whole notebook shares one deadline: each cell
    gets what is left of it, and a cell cut off is interrupted, so the runner's cleanup kills
    the processes it started. Raises what papermill raises for a failed cell."""
    deadline = time.monotonic() + timeout_s
    papermill.execute_notebook(
        str(path), str(executed), parameters=parameters, cwd=str(path.parent),
        kernel_name="python3", progress_bar=False, km=km, interrupt_on_timeout=True,
        timeout_func=lambda cell: max(1, int(deadline - time.monotonic())),
    )  # fmt: skip


def run_notebook(
    path: Path, out_dir: Path, parameters: dict, timeout_s: float, km: AsyncKernelManager
) -> NotebookReport:
    report = NotebookReport(notebook=path.stem)
    executed = out_dir / "executed" / path.name
    executed.parent.mkdir(parents=True, exist_ok=True)
    results_file = Path(parameters["RESULTS_DIR"]) / f"{path.stem}.json"
    results_file.unlink(missing_ok=True)  # a stale file must not pass for this run's figures
    deadline = time.monotonic() + timeout_s
    start = time.monotonic()
    try:
        execute(path, executed, parameters, timeout_s, km)
        # a cell cut off at the deadline may end without an error (its interrupt caught):
        # a notebook that used its whole time did not pass
        report.status = "passed" if time.monotonic() < deadline else "timed out"
        if report.status == "timed out":
            report.error = f"ran into its limit of {timeout_s:g} s"
            report.failed_cell = _failed_cell(executed) if executed.exists() else None
    except Exception as err:  # noqa: BLE001 - any failure of a notebook is reported, not raised
        report.status = "timed out" if time.monotonic() >= deadline else "failed"
        ename, evalue = getattr(err, "ename", type(err).__name__), getattr(err, "evalue", str(err))
        report.error = f"{ename}: {evalue}".strip().splitlines()[0][:300]
        if executed.exists():
            report.failed_cell = _failed_cell(executed)
    report.seconds = time.monotonic() - start
    if executed.exists():
        lines, cell = longest_output(nbformat.read(executed, as_version=4))
        report.longest_output_lines, report.longest_output_cell = lines, cell
    if results_file.exists():
        figures = json.loads(results_file.read_text())
        report.tier = figures.get("tier")
        report.figures = {k: v for k, v in figures.items() if k not in CONTEXT_KEYS}
        report.claims = figures.get("claims", [])
        report.tasks = figures.get("tasks", [])
    return report


def _shown(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def summary_table(reports: list[NotebookReport], figures_per_row: int = 4) -> str:
    rows = [("notebook", "status", "seconds", "failed cell / error or key figures")]
    for r in reports:
        if r.status == "passed":
            shown = list(r.figures.items())[:figures_per_row]
            detail = ", ".join(f"{k}={_shown(v)}" for k, v in shown)
        else:
            detail = f"cell {r.failed_cell}: {r.error}" if r.failed_cell is not None else r.error
        rows.append((r.notebook, r.status, f"{r.seconds:.1f}", detail))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3] for row in rows]
    lines.insert(1, "-" * min(120, max(map(len, lines))))
    return "\n".join(lines)


def claims_summary(reports: list[NotebookReport]) -> str:
    """The claims counted by outcome, then those that did not hold, came out even, or could not
    run, per notebook: where the story differs on this machine."""
    counts = {o: sum(len(r.claims_with(o)) for r in reports) for o in OUTCOMES}
    total = sum(counts.values())
    lines = [f"claims: {total}: " + ", ".join(f"{n} {o}" for o, n in counts.items())]
    shown = {NOT_HELD: "NOT HERE", NO_DIFFERENCE: "NO DIFFERENCE HERE", SKIPPED: "NOT RUN HERE"}
    for outcome, label in shown.items():
        for r in reports:
            for c in r.claims_with(outcome):
                lines.append(f"  {r.notebook}: {label}: {c['text']}")
                true_here = (
                    c["why_skipped"]
                    if outcome == SKIPPED
                    else (c["tie"] if outcome == NO_DIFFERENCE else c["otherwise"])
                )
                lines.append(f"    {'why' if outcome == SKIPPED else 'true here'}: "
                             f"{true_here or '(see the figures)'}")  # fmt: skip
    return "\n".join(lines)


def tasks_summary(reports: list[NotebookReport]) -> str:
    """One line: the learner's tasks of this run, by outcome (make progress lists them)."""
    counts = {o: sum(t["outcome"] == o for r in reports for t in r.tasks) for o in TASK_OUTCOMES}
    return (f"tasks: {sum(counts.values())}: " + ", ".join(f"{n} {o}" for o, n in counts.items())
            + " (make progress lists them)")


def write_claims_report(args, reports: list[NotebookReport], tier: str) -> None:
    """build/claims.md: every claim this run made, with what it measured (docs/claims.md, the
    course's list of its claims, comes from the source: make claims)."""
    try:  # the course image has no git (nor a .git folder)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip() or "unknown"
    except FileNotFoundError:
        commit = "unknown"
    machine = hardware()
    heading = (f"Made by `make verify` on {datetime.date.today().isoformat()} (commit "
               f"`{commit}`, the `{tier}` tier: {machine['cpu']}, {machine['cores']} cores, "
               f"torch {machine['torch']}). Each claim: the sentence its notebook writes (figures "
               "in braces), the condition the run checks, and what that run measured.")
    text = claims_markdown({r.notebook: r.claims for r in reports if r.claims}, heading) + "\n"
    (args.build / "claims.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="run only these (prefixes: 00 03 ...)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (SMOKE=True)")
    parser.add_argument("--nproc", type=int, help="ranks per launched run (NPROC)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], help="force a tier (DEVICE)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per notebook")
    parser.add_argument("--solutions", nargs="?", const="1", metavar="FOLDER",
                        help="check the reference solutions of the exercises (default folder: "
                        "solutions/) instead of the learner's answers")  # fmt: skip
    parser.add_argument("--build", type=Path, default=ROOT / "build", help="output folder")
    parser.add_argument("--notebooks-dir", type=Path, default=ROOT / "notebooks",
                        help="where the NN_*.ipynb notebooks are")  # fmt: skip
    args = parser.parse_args(argv)

    notebooks = select(args.notebooks_dir, args.notebooks)
    if args.solutions:
        folder = args.solutions
        os.environ[SOLUTIONS_ENV] = folder if folder == "1" else str(Path(folder).resolve())
    parameters: dict = {"SMOKE": args.smoke, "RESULTS_DIR": str((args.build / "results").resolve())}
    if args.nproc is not None:
        parameters["NPROC"] = args.nproc
    if args.device is not None:
        parameters["DEVICE"] = args.device
    # the notebooks' own parameter checks, before any kernel starts
    try:
        check_parameters(parameters.get("DEVICE", "auto"), parameters.get("NPROC"), 1, args.smoke)
    except ParameterError as err:
        parser.error(str(err).replace("NPROC=", "--nproc ").replace("DEVICE=", "--device "))
    print(f"verifying {len(notebooks)} notebook(s){' with SMOKE sizes' if args.smoke else ''}")
    os.environ[HEADLESS_ENV] = "1"  # no front end will show a widget: the kernels inherit this

    reports: list[NotebookReport] = []
    sockets_dir = Path(tempfile.mkdtemp(prefix="verify-kernels-"))
    kernels = [start_kernel(notebooks[0], sockets_dir)]
    bar = tqdm(notebooks, unit="notebook", dynamic_ncols=True)  # on stderr: stdout is the report
    try:
        for i, path in enumerate(bar):
            bar.set_description(path.stem)
            km = kernels.pop()
            if i + 1 < len(notebooks):
                kernels.append(start_kernel(notebooks[i + 1], sockets_dir))
            try:
                reports.append(run_notebook(path, args.build, parameters, args.timeout, km))
            finally:
                stop_kernel(km)
            bar.set_postfix(failed=sum(r.status != "passed" for r in reports))
    finally:
        bar.close()
        for km in kernels:
            stop_kernel(km)
        shutil.rmtree(sockets_dir, ignore_errors=True)

    tiers = {r.tier for r in reports} - {None}
    tier = ", ".join(sorted(tiers)) or "unknown (no notebook wrote results)"
    print(f"\ntier: {tier}")
    print(summary_table(reports))
    print("\n" + claims_summary(reports))
    print(tasks_summary(reports))
    html_report = args.build / "report.html"
    budgets = write_report(html_report, reports, select(args.notebooks_dir, []),
                           args.build / "executed", tier, parameters)  # fmt: skip
    rows = [{**asdict(r), "claims_not_held": r.claims_not_held,
             "claims_outcomes": {o: len(r.claims_with(o)) for o in OUTCOMES},
             "class_minutes": budgets[r.notebook]["minutes"]} for r in reports]  # fmt: skip
    (args.build / "verify.json").write_text(
        json.dumps({"tier": tier, "parameters": parameters, "notebooks": rows}, indent=2) + "\n"
    )
    write_claims_report(args, reports, tier)
    print(f"\nreport for the instructor: {html_report}")
    failed = [r.notebook for r in reports if r.status != "passed"]
    print(
        f"\nexecuted copies in {args.build / 'executed'}; "
        + (f"FAILED: {', '.join(failed)}" if failed else "all passed")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
