"""IPython startup file installed by the tests (tests/conftest.py): check every figure.

Inside each kernel the tests start, every matplotlib figure rendered (the inline backend's
picture) or saved (``savefig``) is checked: each visible Axes that holds data (axis on, with
lines, patches, collections or images) needs a title (its own, a twin's, or the figure's
suptitle) and an x and a y label (its own, a shared axis's, or the figure's supxlabel /
supylabel). Axes drawn with ``ax.axis("off")`` (tables, diagrams) and colorbars are exempt;
an Axes with no ticks on either axis (a pie chart) needs its title only.

Each violation is one JSON line in the file named by $COURSEKIT_FIGURE_LOG, with the first
source line and the SHA-1 of the source of the cell that drew it (nbclient sends no cell id);
the file's first line, written at start, says the hook is armed (so a test can tell "no
violations" from "the hook never ran").

matplotlib is patched when it is first imported, not before: kernels that draw nothing do
not pay for importing it.
"""


def _install_figure_check():
    import hashlib
    import importlib.abc
    import importlib.util
    import json
    import os
    import sys

    log_path = os.environ.get("COURSEKIT_FIGURE_LOG")
    if not log_path:
        return
    shell = get_ipython()  # noqa: F821 - IPython defines it for startup files
    current = {"cell_id": None, "first_line": "", "source_sha1": None}
    seen = set()

    def write(record):
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def pre_run_cell(info):
        current["cell_id"] = getattr(info, "cell_id", None)  # nbclient sends none: the hash
        current["source_sha1"] = hashlib.sha1((info.raw_cell or "").encode()).hexdigest()
        lines = [line for line in (info.raw_cell or "").splitlines() if line.strip()]
        current["first_line"] = lines[0][:100] if lines else ""

    shell.events.register("pre_run_cell", pre_run_cell)

    def problems(fig):
        """[(axes index, what it lacks)] for the Axes of ``fig`` that break the rule."""
        suptitle = fig._suptitle.get_text() if fig._suptitle else ""
        supx = fig._supxlabel.get_text() if fig._supxlabel else ""
        supy = fig._supylabel.get_text() if fig._supylabel else ""
        found = []
        for i, ax in enumerate(fig.get_axes()):
            if not (ax.get_visible() and ax.axison and ax.has_data()):
                continue
            if getattr(ax, "_colorbar", None) is not None:
                continue
            twins = ax._twinned_axes.get_siblings(ax)
            lacks = []
            titles = [t.get_text() for a in twins for t in (a.title, a._left_title, a._right_title)]
            if not (suptitle.strip() or any(t.strip() for t in titles)):
                lacks.append("title")
            if not (len(ax.get_xticks()) or len(ax.get_yticks())):
                found.extend([(i, lacks)] if lacks else [])
                continue  # no scale on either axis (a pie, a drawing): nothing to label
            for name, axis, shared, sup in (
                ("x label", ax.xaxis, ax.get_shared_x_axes(), supx),
                ("y label", ax.yaxis, ax.get_shared_y_axes(), supy),
            ):
                if not axis.get_visible():
                    continue  # a twin's hidden axis: its sibling carries the label
                siblings = [getattr(a, axis.axis_name + "axis") for a in shared.get_siblings(ax)]
                if not (sup.strip() or any(s.get_label_text().strip() for s in siblings)):
                    lacks.append(name)
            if lacks:
                found.append((i, lacks))
        return found

    def check(fig, how):
        key = (current["source_sha1"], id(fig))
        if key in seen:
            return
        seen.add(key)
        for index, lacks in problems(fig):
            label = fig.get_label() or f"figure {getattr(fig, 'number', '?')}"
            write({**current, "figure": label, "axes": index, "lacks": lacks, "how": how})

    def patch(backend_bases):
        original = backend_bases.FigureCanvasBase.print_figure

        def print_figure(self, *args, **kwargs):
            try:
                check(self.figure, "rendered or saved")
            except Exception as err:  # noqa: BLE001 - a broken check must show, not hide
                write({**current, "error": f"figure check failed: {err!r}"})
            return original(self, *args, **kwargs)

        backend_bases.FigureCanvasBase.print_figure = print_figure

    class PatchOnImport(importlib.abc.MetaPathFinder):
        """Patch matplotlib.backend_bases right after it is first imported."""

        def find_spec(self, name, path=None, target=None):
            if name != "matplotlib.backend_bases":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = spec.loader.exec_module

            def exec_then_patch(module):
                exec_module(module)
                patch(module)

            spec.loader.exec_module = exec_then_patch
            return spec

    if "matplotlib.backend_bases" in sys.modules:
        patch(sys.modules["matplotlib.backend_bases"])
    else:
        sys.meta_path.insert(0, PatchOnImport())
    write({"armed": os.getpid()})


_install_figure_check()
del _install_figure_check
