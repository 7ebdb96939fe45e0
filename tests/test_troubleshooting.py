"""docs/troubleshooting.md quotes the pinned torch's own messages: each one the CPU tier can
give is produced here (tests/troubleshooting/reproduce.py makes each mistake), and each
GPU-only one is found in torch's source or names NCCL's."""

import json
import re
import subprocess
import sys

import jupyter_client
import nbclient
import nbformat
import pytest
from conftest import ROOT

PAGE = ROOT / "docs" / "troubleshooting.md"
REPRODUCE = ROOT / "tests" / "troubleshooting" / "reproduce.py"
TORCH = ROOT / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
    "site-packages" / "torch"  # fmt: skip
# messages found in the pinned torch's own files (the part checked): a GPU-only one (a
# container's /dev/shm) and the gloo timeouts, of which a run gives one or another by which
# rank's timeout fires first
IN_TORCH = {
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
    "shared memory (shm).": ("lib/libtorch_python.so", "insufficient shared memory (shm)."),
    "Timed out waiting 5000ms for send operation to complete":
        ("lib/libtorch_cpu.so", "for send operation to complete"),
    "Timed out waiting 5000ms for recv operation to complete":
        ("lib/libtorch_cpu.so", "for recv operation to complete"),
    "Application timeout caused pair closure":
        ("lib/libtorch_cpu.so", "Application timeout caused pair closure"),
    "This is typically caused by a remote worker crashing. Check the logs of the remote "
    "worker before reporting an error.": ("lib/libtorch_cpu.so", "caused by a remote worker"),
}  # fmt: skip
# GPU-only messages of NCCL itself, not in torch: the page names where each comes from
FROM_NCCL = {"Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000": "init.cc"}
TWO_RANK_CASES = ("evaluate_on_rank0_through_ddp", "uneven_inputs")


def quotes() -> list[str]:
    return re.findall(r"```text\n(.*?)\n```", PAGE.read_text(), re.S)


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> dict[str, str]:
    """Every message this machine's torch gives for the page's mistakes, by case (and rank)."""
    tmp = tmp_path_factory.mktemp("troubleshooting")
    subprocess.run([sys.executable, str(REPRODUCE), "one-rank", str(tmp / "one.json")],
                   check=True, timeout=300, cwd=tmp)  # fmt: skip
    messages = json.loads((tmp / "one.json").read_text())
    # the port the case found busy is a free one; a learner's message names 29500, torchrun's
    messages["port_in_use"] = re.sub(r"port: \d+", "port: 29500", messages["port_in_use"])
    for case in TWO_RANK_CASES:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", str(REPRODUCE), "two-rank", case,
                        str(tmp / case)], timeout=180, cwd=tmp, capture_output=True)  # fmt: skip
        for rank in (0, 1):
            messages[f"{case} (rank {rank})"] = (tmp / f"{case}.rank{rank}").read_text()
    in_cell, from_child = spawn_from_a_cell(tmp)
    messages["mp_spawn_in_a_notebook (the cell)"] = re.sub(r"process \d+", "process 1", in_cell)
    messages["mp_spawn_in_a_notebook (a child)"] = from_child
    return messages


def spawn_from_a_cell(tmp) -> tuple[str, str]:
    """mp.spawn of a function defined in a notebook cell, in a real kernel: the error the cell
    shows, and the one each child prints to the kernel's stderr (the terminal of Jupyter)."""
    cell = ("import torch.multiprocessing as mp\n\ndef work(rank):\n    print(rank)\n\n"
            "mp.spawn(work, nprocs=2)")  # fmt: skip
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    km = jupyter_client.KernelManager(kernel_name="python3")
    with open(tmp / "kernel.stderr", "w") as stderr:
        km.start_kernel(stderr=stderr)
        try:
            with pytest.raises(nbclient.exceptions.CellExecutionError) as raised:
                nbclient.NotebookClient(nb, km=km, timeout=180).execute()
        finally:
            km.shutdown_kernel(now=True)
    in_cell = f"{raised.value.ename}: {raised.value.evalue}"
    printed = (tmp / "kernel.stderr").read_text().splitlines()
    child = [line for line in printed if line.startswith("AttributeError")]
    assert child, "\n".join(printed[-30:])
    return in_cell, child[0]


def test_every_message_the_cpu_tier_gives_is_quoted_word_for_word(produced):
    on_page = quotes()
    for case, message in produced.items():
        assert message != "(no error)", f"{case}: the mistake gave no error on this torch"
        found = [q for q in on_page if len(q) >= 25 and q in message]
        assert found, f"{case}: docs/troubleshooting.md quotes no part of\n  {message[:400]}"


def test_every_quote_on_the_page_is_produced_here_or_found_where_the_page_says(produced):
    page = PAGE.read_text()
    for quote in quotes():
        if any(quote in message for message in produced.values()):
            continue
        if quote in IN_TORCH:
            library, part = IN_TORCH[quote]
            assert part.encode() in (TORCH / library).read_bytes(), quote
        elif quote in FROM_NCCL:
            assert f"NCCL's `{FROM_NCCL[quote]}`" in page, quote
        else:
            pytest.fail(f"the page quotes a message nothing checks: {quote!r}")


def test_the_readme_and_every_notebooks_closing_cell_point_to_the_page(tmp_path, monkeypatch):
    assert "(docs/troubleshooting.md)" in (ROOT / "README.md").read_text()
    import importlib

    import IPython.display

    import coursekit
    from coursekit.course import COURSE

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    setup = coursekit.configure(SMOKE=True, RESULTS_DIR=tmp_path, quiet=True)
    for nb in COURSE:
        lesson = importlib.import_module(f"coursekit.lessons.nb{nb.number}")
        shown.clear()
        lesson.close(setup, coursekit.Claims())  # the last cell of every notebook
        assert "](../docs/troubleshooting.md)" in shown[-1].data, nb.number


def test_every_link_of_the_page_leads_to_a_file_of_the_course():
    links = re.findall(r"\]\((\.\./[^)#]+)", PAGE.read_text())
    assert links and all((PAGE.parent / link).exists() for link in links), links
