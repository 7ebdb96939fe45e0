"""Checks home-made ZeRO-1 optimizers against torch's ZeroRedundancyOptimizer, in float64.

    torchrun --nproc-per-node 3 launchers/check_my_zero1.py --impl launchers/my_zero1.py:MyZeRO1

--impl FILE:CLASS (repeatable). How each class is checked, and what is recorded on every rank:
launchers/nb11/zero1_checker.py. Rank 0 prints each class's first problem (or ok).
"""

import argparse
import os

import torch
import torch.distributed as dist
from common.devices import init_distributed
from nb11.zero1_checker import Recorder, check_class, write_metrics


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", action="append", required=True, help="FILE:CLASS")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    device, backend = init_distributed(args.device)
    recorder = Recorder()  # before the classes' files are loaded, whatever they import
    cases = []
    for spec in args.impl:
        cases.append(check_class(spec, len(cases), args.steps, recorder, device))
        if rank == 0:
            print(f"{spec}: " + ("ok" if cases[-1]["ok"] else cases[-1]["problems"][0]), flush=True)
    write_metrics(args.out, backend, cases, device)  # every rank: it gathers who ran where
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
