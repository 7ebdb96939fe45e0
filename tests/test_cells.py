"""coursekit.cells (show_diff, show_outline, output_lines) and the checks the tests run on
every executed notebook: output size and the figure hook, which must catch what it is for."""

import os

import nbformat
import pytest
from conftest import run_papermill

import coursekit
from coursekit.cells import output_lines, shown_lines

OLD = '''"""Train a model.

More words."""
import os


def main():
    """Run it."""
    print("hello")
    return 0
'''
NEW = OLD.replace('print("hello")', 'print("hello, world")\n    print("bye")')


def test_show_diff_names_both_files_and_counts(tmp_path):
    (tmp_path / "a.py").write_text(OLD)
    (tmp_path / "b.py").write_text(NEW)
    shown = coursekit.show_diff(tmp_path / "a.py", tmp_path / "b.py")
    lines = str(shown).splitlines()
    assert lines[0].startswith(f"{tmp_path.name}/a.py -> {tmp_path.name}/b.py: +2 -1 lines")
    assert '-    print("hello")' in lines and '+    print("bye")' in lines
    assert not any(line.startswith(("---", "+++")) for line in lines)
    assert shown._repr_markdown_().startswith("```diff\n")
    assert repr(shown) == str(shown)  # text/plain is the diff itself: the output check counts it


def test_show_diff_says_a_definition_moved_to_an_import_in_one_line(tmp_path):
    """A step that imports a function the step before defined shows one line for it, not its
    body, and only for that function: a definition simply removed shows every line."""
    old = (OLD + '\n\ndef save(path):\n    """Write it."""\n    return path\n'
           '\n\ndef drop():\n    pass\n')
    new = "from step_a import save\n" + OLD
    (tmp_path / "a.py").write_text(old)
    (tmp_path / "b.py").write_text(new)
    lines = str(coursekit.show_diff(tmp_path / "a.py", tmp_path / "b.py")).splitlines()
    assert "-def save(path):  # 3 lines, now imported from step_a" in lines
    assert '-    """Write it."""' not in lines and "-    return path" not in lines
    assert "-def drop():" in lines and "-    pass" in lines
    assert lines[0].endswith(": +1 -9 lines (11 lines in all)")  # the counts are the real diff's


def test_show_outline_lists_docstrings_and_sizes(tmp_path):
    (tmp_path / "a.py").write_text(OLD)
    lines = str(coursekit.show_outline(tmp_path / "a.py")).splitlines()
    assert lines[0] == f"{tmp_path.name}/a.py (10 lines): Train a model."
    assert lines[1].split() == ["def", "main", "4", "lines", "Run", "it."]


def test_show_functions_and_show_lines_print_the_launchers_own_lines(tmp_path):
    net = "\n\nclass Net:\n    def forward(self, x):\n        return x\n"
    (tmp_path / "a.py").write_text(NEW + net)
    shown = str(coursekit.show_functions(tmp_path / "a.py", "Net.forward", "main")).splitlines()
    assert shown == [f"# {tmp_path.name}/a.py, lines 7-11", "def main():", '    """Run it."""',
                     '    print("hello, world")', '    print("bye")', "    return 0",
                     f"# {tmp_path.name}/a.py, lines 15-16", "    def forward(self, x):",
                     "        return x"]  # fmt: skip
    with pytest.raises(ValueError, match="defines no train"):
        coursekit.show_functions(tmp_path / "a.py", "train")
    span = str(coursekit.show_lines(tmp_path / "a.py", "hello", "return")).splitlines()
    assert span == [f"# {tmp_path.name}/a.py, lines 9-11", '    print("hello, world")',
                    '    print("bye")', "    return 0"]  # fmt: skip
    with pytest.raises(ValueError, match="no line containing 'import torch' after line 9"):
        coursekit.show_lines(tmp_path / "a.py", "hello", "import torch")
    assert shown_lines('coursekit.show_lines("a.py", "hello", "return")', tmp_path) == span


def test_shown_lines_reads_the_call_statically(tmp_path):
    (tmp_path / "a.py").write_text(OLD)
    (tmp_path / "b.py").write_text(NEW)
    call = 'coursekit.show_diff("a.py", "b.py")'
    assert shown_lines(call, tmp_path) == str(coursekit.show_diff(*[tmp_path / n for n in
                                                                    ("a.py", "b.py")])).split("\n")
    assert shown_lines('coursekit.show_outline("a.py")', tmp_path)[0].endswith("Train a model.")
    assert shown_lines("x = 1\ncoursekit.show_outline('a.py')", tmp_path) is None
    assert shown_lines("show_outline('a.py')", tmp_path) is None


def test_output_lines_counts_text_not_pictures():
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a\nb"),
        nbformat.v4.new_output("stream", name="stdout", text="c\n"),  # continues line "b"
        nbformat.v4.new_output("stream", name="stderr", text="w1\nw2\n"),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBOR",
                                                     "text/plain": "<Figure>"}),
        nbformat.v4.new_output("execute_result", data={"text/plain": "1\n2\n3"}),
        nbformat.v4.new_output("display_data", data={"text/markdown": "m1\nm2",
                                                     "text/plain": "<Markdown object>"}),
    ]
    assert output_lines(cell) == 2 + 2 + 3 + 2
    listing = coursekit.cells.Listing([f"line {i}" for i in range(40)], "diff")
    cell.outputs = [nbformat.v4.new_output("execute_result", data={
        "text/markdown": listing._repr_markdown_(), "text/plain": repr(listing)})]
    assert output_lines(cell) == 40  # what the hygiene test computes for a show_diff


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


PLOT = "import matplotlib.pyplot as plt\n"


def test_labelled_figures_and_short_outputs_pass(tmp_path):
    nb = _notebook(
        tmp_path / "good.ipynb",
        "import os\nassert os.environ['COURSEKIT_HEADLESS'] == '1'",
        PLOT + "fig, ax = plt.subplots()\nax.plot([0, 1], [1, 2])\n"
        "ax.set(title='t', xlabel='step', ylabel='loss (nats)')",
        # a twin axis shares the x label and title of its sibling; an axis("off") table is exempt
        PLOT + "fig, (ax, tab) = plt.subplots(1, 2)\nax.bar(['a', 'b'], [1, 2])\n"
        "ax.set(xlabel='variant', ylabel='ms')\nfig.suptitle('s')\nax2 = ax.twinx()\n"
        "ax2.plot([0, 1], [3, 4])\nax2.set_ylabel('MB')\ntab.axis('off')\n"
        "tab.table([['1', '2']])\nfig.savefig('good.png')",
        # a pie has no scale to label: its title is enough
        PLOT + "fig, ax = plt.subplots()\nax.pie([1, 2], labels=['a', 'b'])\nax.set_title('p')",
        "for i in range(40):\n    print(i)",
    )  # fmt: skip
    run_papermill(nb, tmp_path / "run", {})


def test_unlabelled_figures_fail_rendered_or_saved(tmp_path):
    nb = _notebook(
        tmp_path / "bad.ipynb",
        "x = 1",
        PLOT + "fig, ax = plt.subplots()\nax.plot([0, 1], [1, 2])\nax.set_xlabel('step')",
        PLOT + "fig, ax = plt.subplots()\nax.bar(['a'], [1])\nax.set(title='t', ylabel='ms')\n"
        "fig.savefig('bad.png')\nplt.close(fig)",
    )  # fmt: skip
    with pytest.raises(AssertionError) as failed:
        run_papermill(nb, tmp_path / "run", {})
    message = str(failed.value)
    assert "cell 1 (import matplotlib.pyplot as plt): figure 1, axes 0 lacks title, y label" in (
        message)
    assert "cell 2 (import matplotlib.pyplot as plt)" in message and "lacks x label" in message


def test_a_cell_printing_41_lines_fails(tmp_path):
    nb = _notebook(tmp_path / "long.ipynb", "print('short')",
                   "import sys\nfor i in range(41):\n    print(i, file=sys.stderr)")
    with pytest.raises(AssertionError, match=r"cell 1 \(41 lines\): import sys"):
        run_papermill(nb, tmp_path / "run", {})
    assert "COURSEKIT_FIGURE_LOG" not in os.environ  # restored after the run
