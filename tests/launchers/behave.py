"""A launcher that misbehaves on request, for the runner's tests.

--mode chatty : every rank prints many long lines fast (garbling would show)
--mode slow   : rank 0 prints, waits, prints again (live streaming would show)
--mode fail   : rank 1 raises a planted error after the others reach a barrier
--mode hang   : rank 0 waits in an all-reduce the others never join; they sleep forever
--mode gloo-connect-once / gloo-connect-always: rank 1 fails before the group forms with gloo's
                connect error (planted text: the real one cannot be provoked at will) on its
                first attempt / on every attempt; each attempt adds a line to OUT/attempts
--token is only there so the tests can find these processes by their command line.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
MODES = ["chatty", "slow", "fail", "hang", "gloo-connect-once", "gloo-connect-always"]
parser.add_argument("--mode", required=True, choices=MODES)
parser.add_argument("--token", default="")
parser.add_argument("--device", default="cpu")
parser.add_argument("--out", default="out")
args = parser.parse_args()

if args.mode.startswith("gloo-connect") and os.environ["RANK"] == "1":
    os.makedirs(args.out, exist_ok=True)
    attempts = os.path.join(args.out, "attempts")
    first = not os.path.exists(attempts)
    with open(attempts, "a") as f:
        f.write("attempt\n")
    if first or args.mode == "gloo-connect-always":
        raise RuntimeError("Gloo connectFullMesh failed with [planted] Connection closed by peer")
dist.init_process_group("gloo")
rank = dist.get_rank()
if args.mode == "chatty":
    for i in range(200):
        print(f"line {i:03d} from rank {rank}: " + f"r{rank}" * 200)
elif args.mode == "slow":
    if rank == 0:
        print("first line", flush=True)
        time.sleep(3)
        print("second line", flush=True)
elif args.mode == "fail":
    if rank == 1:
        raise ValueError("planted failure on rank 1 (code 7f3a)")
    time.sleep(30)  # the other ranks are busy when rank 1 dies
elif args.mode == "hang":
    print(f"pid {os.getpid()} waiting forever", flush=True)
    if rank == 0:
        dist.all_reduce(torch.ones(1))  # HANG-COLLECTIVE: no other rank joins it
    while True:
        time.sleep(1)  # HANG-SLEEP
dist.destroy_process_group()
