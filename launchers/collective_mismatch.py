"""Pitfall 2b (BROKEN ON PURPOSE): mismatched raw collectives, and how to make them speak.

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node 2 launchers/collective_mismatch.py
    torchrun --nproc-per-node 2 launchers/collective_mismatch.py --case skip

--case shape: every rank all-reduces a tensor, but each a different shape (3 + rank).
  Plain, the backend pairs them anyway: a crash or a wrong result, with no word of why.
  With TORCH_DISTRIBUTED_DEBUG=DETAIL every collective is checked first across ranks,
  and the error names the operation and the shapes.
--case skip: rank 0 skips an all-reduce the others make, then all call monitored_barrier
  (gloo only), which names the ranks that did not arrive.
"""

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=["shape", "skip"], default="shape")
    parser.add_argument("--pg-timeout", type=lambda s: timedelta(seconds=float(s)),
                        help="seconds per collective (default: torch's, 30 min gloo, 10 NCCL)")
    parser.add_argument("--device", default="cpu", help="gloo on CPU tensors, on every tier")
    parser.add_argument("--out", default="out")
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=args.pg_timeout)
    rank = dist.get_rank()
    if args.case == "shape":
        t = torch.ones(3 + rank)  # BUG: the shapes differ across ranks
        dist.all_reduce(t)
        print(f"all_reduce returned {t.tolist()} (no error: it paired tensors of different shapes)")
    else:
        if rank != 0:  # BUG: rank 0 skips this collective
            dist.all_reduce(torch.ones(1))
        dist.monitored_barrier(timeout=args.pg_timeout and args.pg_timeout / 2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
