"""A launcher for the browser test: rank 0 prints a step line every --interval seconds.

Every rank says hello first, so the page shows several ranks' lines while the run goes on.
"""

import argparse
import time

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--interval", type=float, default=0.5)
parser.add_argument("--device", default="cpu")
parser.add_argument("--out", default="out")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"hello from rank {rank} of {dist.get_world_size()}", flush=True)
dist.barrier()
for step in range(args.steps):
    time.sleep(args.interval)
    if rank == 0:
        print(f"step {step + 1}/{args.steps}", flush=True)
dist.barrier()
dist.destroy_process_group()
