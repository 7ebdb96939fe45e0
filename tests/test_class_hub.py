"""The class server for real: JupyterHub on 127.0.0.1 with 3 seats on this machine, three
attendees logged in in a real browser at the same time, notebook 00 run with Run All in each
seat; then, from a seat's own kernel, what it can see and touch; the class check over every
seat; and nothing left once the hub stops. A plan that cannot work is refused first.

Seats are system users (coursekit/classhub.py), so the hub needs root, as CI runs; elsewhere
the test is skipped with the reason printed.
"""

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from browser_kit import artifacts_dir, free_port, launch_browser, sync_playwright
from conftest import ROOT
from test_browser import PANEL, PROMPTS_JS, assert_ran_cleanly, saved_copy, wait_for

from coursekit import classhub

SEATS = 3
PASSWORD = "workshop-" + os.urandom(4).hex()
NOTEBOOK = "00_environment_check.ipynb"


def hub_command(*args) -> list[str]:
    return [sys.executable, "-m", "coursekit.classhub", *map(str, args)]


def test_a_plan_that_cannot_work_is_refused_before_anything_starts(tmp_path):
    seats_dir = tmp_path / "seats"
    proc = subprocess.run(hub_command("--seats", 3, "--gpus", 2, "--gpus-per-seat", 1,
                                      "--seats-dir", seats_dir),
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CLASS_PASSWORD": PASSWORD})  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("class hub refused: --gpus-per-seat 1: 3 seats")
    assert "need 3 GPUs, this server has 2: pass --seats 2" in proc.stderr
    assert not seats_dir.exists()  # no seat, no user, no process was made


def reachable_by_all(path: Path) -> list[tuple[Path, int]]:
    """Let every user traverse the folders above ``path`` (this machine's Python lives under
    /root, mode 700); -> the folders changed and their old modes, to put back."""
    changed = []
    for folder in reversed(path.parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
            changed.append((folder, stat.S_IMODE(mode)))
    return changed


@pytest.fixture(scope="module")
def hub():
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("the class hub makes a system user per seat: it needs root and useradd")
    if not classhub.PROXY.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("configurable-http-proxy is installed with npm, which is missing here")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(classhub.HUB_DIR)],
                       check=True, capture_output=True, timeout=600)  # fmt: skip
    changed = reachable_by_all(Path(sys.executable).resolve()) + reachable_by_all(ROOT)
    seats_dir = Path(tempfile.mkdtemp(prefix="ddp-class-", dir="/tmp"))
    port = free_port()
    log = (artifacts_dir("class_hub") / "hub.log").open("w")
    proc = subprocess.Popen(hub_command("--seats", SEATS, "--seats-dir", seats_dir, "--port", port),
                            env={**os.environ, "CLASS_PASSWORD": PASSWORD}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        yield from served(proc, port, seats_dir, log)
    finally:  # the seats' users and copies, and the folders' modes, as they were
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        log.close()
        subprocess.run(hub_command("--remove-seats", "--seats-dir", seats_dir), check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        for folder, mode in changed:
            folder.chmod(mode)


def served(proc, port: int, seats_dir: Path, log):
    base = f"http://127.0.0.1:{port}"
    state_file = seats_dir / ".hub" / "state.json"

    def up():
        try:
            with urllib.request.urlopen(f"{base}/hub/api/", timeout=2):
                return state_file.exists()
        except OSError:
            return proc.poll() is not None  # ended: stop waiting, the assert says why

    wait_for(up, 120)
    assert proc.poll() is None, Path(log.name).read_text()[-3000:]
    yield {"base": base, "proc": proc, "state": json.loads(state_file.read_text()),
           "seats_dir": seats_dir, "log": Path(log.name)}


def log_in_and_run_all(page, base: str, seat: str) -> None:
    """As an attendee: the hub's login page, the seat's name and the workshop's password, then
    notebook 00 opened in the seat's JupyterLab and Run > Run All Cells."""
    page.goto(f"{base}/hub/login?next=/user/{seat}/lab/tree/{NOTEBOOK}")  # as a link handed out
    page.fill("#username_input", seat)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    page.wait_for_url(f"**/user/{seat}/lab**", timeout=120_000)
    page.locator(f"{PANEL} .jp-Cell").first.wait_for(timeout=120_000)
    idle = page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']")
    settled = 0
    for _ in range(240):  # until the kernel is idle and no dialog came up for 3 seconds
        settled = 0 if pick_the_kernel(page) or not idle.count() else settled + 1
        if settled >= 12:
            break
        time.sleep(0.25)
    run_all(page)


def run_all(page) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def never_started(page) -> bool:
    """Run All left every cell unrun and the kernel idle (it was clicked while the kernel
    was being chosen): a person clicks Run All again."""
    prompts = page.evaluate(PROMPTS_JS, PANEL)
    idle = page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']").count()
    return bool(idle) and not any(re.search(r"[\d*]", p) for p in prompts)


def pick_the_kernel(page) -> bool:
    """A server still starting may ask which kernel to start: the notebook's own, as an
    attendee picks it. -> whether it asked."""
    chooser = page.get_by_role("dialog").filter(has_text="Select Kernel")
    if chooser.count():
        chooser.get_by_role("button", name="Select", exact=True).click()
        return True
    return False


def steady(condition, looks: int, gap: float) -> bool:
    """``condition()`` held at each of ``looks`` looks, ``gap`` seconds apart."""
    for k in range(looks):
        if not condition():
            return False
        if k < looks - 1:
            time.sleep(gap)
    return True


def finished(page) -> bool:
    prompts = page.evaluate(PROMPTS_JS, PANEL)
    idle = page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']").count()
    started = any(re.search(r"\d", p) for p in prompts)
    return bool(idle) and started and not any("*" in p for p in prompts)


@pytest.mark.slow
def test_three_attendees_run_notebook_00_at_once_each_in_their_own_seat(hub):
    seats = hub["state"]["seats"]
    repo_result = ROOT / "build" / "results" / "00_environment_check.json"
    repo_before = repo_result.stat().st_mtime if repo_result.exists() else None
    shots = artifacts_dir("class_hub")
    homes = {s["name"]: s["home"] for s in seats}
    with sync_playwright()() as playwright:
        browser = launch_browser(playwright)
        pages = {s["name"]: browser.new_context().new_page() for s in seats}
        start = time.monotonic()
        for name, page in pages.items():  # all three log in and start before any has finished
            log_in_and_run_all(page, hub["base"], name)
        running = set(pages)
        while running:
            if time.monotonic() - start > 300:
                for name in running:
                    pages[name].screenshot(path=shots / f"{name}_still_running.png")
                pytest.fail(f"still running after 300 s: {running} (screenshots in {shots})")
            for name in list(running):
                pick_the_kernel(pages[name])
                if steady(lambda page=pages[name]: never_started(page), looks=5, gap=1):
                    run_all(pages[name])  # still nothing ran after 5 s: once more
                if steady(lambda page=pages[name]: finished(page), looks=3, gap=0.5):
                    running.discard(name)
            time.sleep(0.5)
        print(f"\nthree seats ran notebook 00 at once in {time.monotonic() - start:.0f} s")
        for name, page in pages.items():
            page.screenshot(path=shots / f"{name}.png")
            file = Path(homes[name]) / "notebooks" / NOTEBOOK
            before = file.stat().st_mtime
            page.locator(f"{PANEL} .jp-NotebookPanel-toolbar "
                         "[data-command='docmanager:save']").click()  # fmt: skip
            nb = wait_for(lambda file=file, before=before: saved_copy(file, before, []), 30)
            assert nb is not None, f"{name}: the saved notebook never reached the disk"
            assert_ran_cleanly(nb, f"{name}/{NOTEBOOK}")
            said = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                           for c in nb.cells if c.cell_type == "code" for o in c.outputs)
            assert "READY" in said, f"{name}: notebook 00 did not say READY"
        browser.close()
    for seat in seats:  # each seat's run wrote into its own copy, none into the course's
        home = Path(seat["home"])
        result = json.loads((home / "build" / "results" / "00_environment_check.json").read_text())
        assert result["tier"] == seat["tier"] and result["n_gpus"] == 0
        assert all(p.stat().st_uid == pwd_uid(seat["name"]) for p in (home / "build").rglob("*"))
    assert (repo_result.stat().st_mtime if repo_result.exists() else None) == repo_before


def pwd_uid(name: str) -> int:
    import pwd

    return pwd.getpwnam(name).pw_uid


# run in seat01's own kernel: what it sees of its machine, and each thing it tries on seat02
PROBE = """
import json, os
other_home, other_pid = {home!r}, {pid}
tried = {{}}
for what, attempt in {{
    "read a file": lambda: open(os.path.join(other_home, "notebooks", {notebook!r})).read(),
    "list the folder": lambda: os.listdir(other_home),
    "write a file": lambda: open(os.path.join(other_home, "mine.txt"), "w").write("x"),
    "signal a process": lambda: os.kill(other_pid, 0),
    "read its environment": lambda: open(f"/proc/{{other_pid}}/environ").read(),
}}.items():
    try:
        attempt()
        tried[what] = "ALLOWED"
    except PermissionError:
        tried[what] = "refused"
print(json.dumps({{"tried": tried, "cores": sorted(os.sched_getaffinity(0)),
                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "uid": os.getuid(),
                  "threads": os.environ.get("OMP_NUM_THREADS")}}))
"""


@pytest.mark.slow
def test_a_seat_sees_its_own_cores_and_cannot_touch_another_seat(hub):
    import asyncio

    from coursekit.classcheck import Hub

    first, second = hub["state"]["seats"][:2]
    hub_api = Hub(hub["state"])
    asyncio.run(hub_api.start_server(second["name"]))
    other = [p for p in psutil.process_iter(["uids", "cmdline"])
             if p.info["uids"].real == pwd_uid(second["name"])]  # fmt: skip
    assert other, f"{second['name']}'s server is not running"

    async def probe():
        await hub_api.start_server(first["name"])
        return await hub_api.run_in_kernel(first["name"], PROBE.format(
            home=second["home"], pid=other[0].pid, notebook=NOTEBOOK), timeout=60)

    seen = json.loads(asyncio.run(probe()).strip().splitlines()[-1])
    assert seen["tried"] == dict.fromkeys(seen["tried"], "refused"), seen["tried"]
    assert seen["cores"] == first["cpus"] and seen["gpus"] == ""
    assert seen["uid"] == pwd_uid(first["name"])
    assert seen["threads"] == first["env"]["OMP_NUM_THREADS"]
    assert not (Path(second["home"]) / "mine.txt").exists()


@pytest.mark.slow
def test_the_class_check_runs_every_seat_at_once_and_prints_its_table(hub):
    state_file = hub["seats_dir"] / ".hub" / "state.json"
    proc = subprocess.run([sys.executable, "-m", "coursekit.classcheck", "--state", state_file,
                           "--only", "00"], capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seat    tier found  GPUs  cores  seconds  verdict" in proc.stdout
    assert f"{SEATS} of {SEATS} seats green at once (00 at SMOKE)" in proc.stdout
    report = json.loads((ROOT / "build" / "class-check.json").read_text())
    assert [r["seat"] for r in report["seats"]] == [s["name"] for s in hub["state"]["seats"]]


@pytest.mark.slow
def test_nothing_is_left_once_the_hub_stops(hub):
    names = [s["name"] for s in hub["state"]["seats"]]
    assert classhub.seat_processes(names), "the seats' servers should be up before the stop"
    hub["proc"].send_signal(signal.SIGINT)
    assert hub["proc"].wait(90) == 0
    assert not classhub.seat_processes(names)
    state_dir = str(hub["seats_dir"] / ".hub")
    left = [p for p in psutil.process_iter(["cmdline"]) if state_dir in " ".join(
        p.info["cmdline"] or []) or "configurable-http-proxy" in " ".join(p.info["cmdline"] or [])]
    assert not left, [p.info["cmdline"] for p in left]
    assert "no seat's process is left" in hub["log"].read_text()
