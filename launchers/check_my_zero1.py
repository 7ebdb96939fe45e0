"""Checks home-made ZeRO-1 optimizers against torch's ZeroRedundancyOptimizer, in float64.

    torchrun --nproc-per-node 3 launchers/check_my_zero1.py --impl launchers/my_zero1.py:MyZeRO1

--impl FILE:CLASS (repeatable). How each class is checked, and what is recorded on every rank:
launchers/common/zero1_checker.py. Rank 0 prints each class's first problem (or ok).
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: see DDP's lazy import
from common.devices import device_and_backend
from common.zero1_checker import Recorder, check_class, write_metrics


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", action="append", required=True, help="FILE:CLASS")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]),
                                         torch.cuda.device_count() if args.device == "cuda" else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
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
