"""A launcher that misbehaves on request, for the runner's tests.

--mode chatty : every rank prints many long lines fast (garbling would show)
--mode slow   : rank 0 prints, waits, prints again (live streaming would show)
--mode fail   : rank 1 raises a planted error after the others reach a barrier
--mode hang   : rank 0 waits in an all-reduce the others never join; they sleep forever
--token is only there so the tests can find these processes by their command line.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True, choices=["chatty", "slow", "fail", "hang"])
parser.add_argument("--token", default="")
parser.add_argument("--device", default="cpu")
parser.add_argument("--out", default="out")
args = parser.parse_args()

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
