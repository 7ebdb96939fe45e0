"""The night before: every seat of the class hub checked at once, in its own kernel.

    python -m coursekit.classcheck [--state /srv/ddp-class/.hub/state.json] [--only 00 03]
    (make class-check, while make class-hub runs)

For every seat at once, through the hub's API with the check's own token: start the seat's
server as an attendee's login would, open a kernel there (the seat's user, cgroup, cores and
environment), and in it run ``coursekit.verify --smoke`` on notebooks 00 and 03 in the seat's
own copy. Prints a table (seat, tier found, GPUs, cores, seconds, verdict) and how many seats
were green at once; writes it to build/class-check.json. A seat whose check fails says why.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import time
import uuid
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

ROOT = Path(__file__).resolve().parent.parent
STATE = Path("/srv/ddp-class/.hub/state.json")
REPORT = ROOT / "build" / "class-check.json"
# what the check runs in each seat's kernel: the course's own headless verify, in the seat's copy
CHECK = """
import json, os, subprocess, sys, time
start = time.monotonic()
run = subprocess.run([sys.executable, "-m", "coursekit.verify", "--smoke", *{only!r}],
                     cwd=os.environ["HOME"], capture_output=True, text=True, timeout={limit})
found = json.load(open(os.path.join(os.environ["HOME"], "build", "verify.json")))
print(json.dumps({{"rc": run.returncode, "seconds": time.monotonic() - start,
                  "tier": found["tier"], "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                  "cores": sorted(os.sched_getaffinity(0)),
                  "notebooks": {{n["notebook"][:2]: n["status"] for n in found["notebooks"]}},
                  "tail": (run.stdout + run.stderr)[-600:]}}))
"""


class Hub:
    """The class hub's API, as the check's service (its token from the hub's state file)."""

    def __init__(self, state: dict):
        self.base = state["bind_url"].replace("0.0.0.0", "127.0.0.1")
        self.token = state["check_token"]
        self.client = AsyncHTTPClient()

    async def call(self, path: str, method: str = "GET", body: dict | None = None):
        request = HTTPRequest(f"{self.base}{path}", method=method, validate_cert=False,
                              headers={"Authorization": f"token {self.token}"},
                              body=json.dumps(body) if body is not None else
                              ("" if method == "POST" else None), request_timeout=60)  # fmt: skip
        response = await self.client.fetch(request)
        return json.loads(response.body) if response.body else None

    async def start_server(self, user: str, timeout: float = 120) -> None:
        """The seat's server, started as a login would, once it answers."""
        try:
            await self.call(f"/hub/api/users/{user}/server", "POST")
        except HTTPClientError as err:
            if err.code != 400:  # 400: already running
                raise
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = await self.call(f"/hub/api/users/{user}")
            if model["servers"].get("", {}).get("ready"):
                return
            await asyncio.sleep(1)
        raise TimeoutError(f"{user}'s server did not start in {timeout:g} s (the hub's log "
                           "says why)")

    async def run_in_kernel(self, user: str, code: str, timeout: float) -> str:
        """``code`` run in a new kernel of ``user``'s server; -> what it printed. Raises with
        the kernel's traceback when the code fails."""
        kernel = await self.call(f"/user/{user}/api/kernels", "POST", {"name": "python3"})
        url = f"{self.base}/user/{user}/api/kernels/{kernel['id']}/channels"
        request = HTTPRequest(url.replace("http", "ws", 1), validate_cert=False,
                              headers={"Authorization": f"token {self.token}"})  # fmt: skip
        socket = await websocket_connect(request)
        msg_id = uuid.uuid4().hex
        socket.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "class-check",
                       "session": uuid.uuid4().hex, "version": "5.3",
                       "date": datetime.datetime.now(datetime.UTC).isoformat()},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        printed, error = [], None
        try:
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                raw = await asyncio.wait_for(socket.read_message(), max(left, 0.1))
                if raw is None:
                    raise ConnectionError(f"{user}'s kernel closed its channel")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                if kind == "stream":
                    printed.append(msg["content"]["text"])
                elif kind == "error":
                    error = "\n".join(msg["content"]["traceback"])
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    break
        finally:
            socket.close()
            await self.call(f"/user/{user}/api/kernels/{kernel['id']}", "DELETE")
        if error:
            raise RuntimeError(f"in {user}'s kernel:\n{error}")
        return "".join(printed)


async def check_seat(hub: Hub, seat: dict, only: list[str], limit: float) -> dict:
    start = time.monotonic()
    try:
        await hub.start_server(seat["name"])
        printed = await hub.run_in_kernel(seat["name"], CHECK.format(only=only, limit=limit),
                                          timeout=limit + 30)  # fmt: skip
        found = json.loads(printed.strip().splitlines()[-1])
    except Exception as err:  # the table names the seat and the reason; the others go on
        return {"seat": seat["name"], "verdict": f"FAILED: {err}"[:300],
                "seconds": time.monotonic() - start}
    green = found["rc"] == 0 and all(s == "passed" for s in found["notebooks"].values())
    expected = seat["tier"]
    verdict = ("green" if green and found["tier"] == expected else
               f"tier {found['tier']}, the plan said {expected}" if green else
               "FAILED: " + ", ".join(f"{k} {v}" for k, v in found["notebooks"].items()
                                      if v != "passed") + " " + found["tail"][-200:])  # fmt: skip
    return {"seat": seat["name"], "tier": found["tier"], "gpus": found["gpus"] or "-",
            "cores": ",".join(map(str, found["cores"])), "seconds": found["seconds"],
            "notebooks": found["notebooks"], "verdict": verdict}


def table(rows: list[dict]) -> str:
    head = ("seat", "tier found", "GPUs", "cores", "seconds", "verdict")
    lines = [head] + [(r["seat"], r.get("tier", "-"), r.get("gpus", "-"), r.get("cores", "-"),
                       f"{r['seconds']:.0f}", r["verdict"]) for r in rows]  # fmt: skip
    widths = [max(len(str(line[i])) for line in lines) for i in range(5)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line[:5], widths, strict=True))
                     + "  " + line[5] for line in lines)


async def check_all(state: dict, only: list[str], limit: float) -> list[dict]:
    hub = Hub(state)
    return list(await asyncio.gather(*(check_seat(hub, s, only, limit) for s in state["seats"])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.classcheck",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=Path, default=STATE,
                        help="the hub's state file (<seats-dir>/.hub/state.json)")
    parser.add_argument("--only", nargs="+", default=["00", "03"], help="the notebooks to run")
    parser.add_argument("--limit", type=float, default=900, help="seconds per seat, at most")
    args = parser.parse_args(argv)
    if not args.state.exists():
        print(f"class check: {args.state} does not exist: start the hub first (make class-hub) "
              "or pass --state <seats-dir>/.hub/state.json", file=sys.stderr)
        return 2
    state = json.loads(args.state.read_text())
    start = time.monotonic()
    rows = asyncio.run(check_all(state, args.only, args.limit))
    green = sum(r["verdict"] == "green" for r in rows)
    print(table(rows))
    print(f"\n{green} of {len(rows)} seats green at once ({', '.join(args.only)} at SMOKE), "
          f"{time.monotonic() - start:.0f} s in all")
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps({"date": datetime.date.today().isoformat(), "only": args.only,
                                  "green": green, "seats": rows,
                                  "seconds": time.monotonic() - start}, indent=1))  # fmt: skip
    return 0 if green == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
