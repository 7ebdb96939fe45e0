"""Notebook 08 §2 (BROKEN ON PURPOSE): ranks all-reduce tensors of different shapes.

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node 2 launchers/collective_mismatch.py

Plain, the backend pairs them anyway: a crash or a wrong result, with no word of why. Under
TORCH_DISTRIBUTED_DEBUG=DETAIL the error names the operation and the shapes.
"""

import torch
import torch.distributed as dist
from common.devices import init_distributed
from common.pitfall_harness import pitfall_parser


def main():
    args = pitfall_parser(__doc__).parse_args()  # --pg-timeout, --device, --out
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)
    rank = dist.get_rank()
    t = torch.ones(3 + rank, device=device)  # BUG: the shapes differ across ranks
    dist.all_reduce(t)
    print(f"all_reduce returned {t.tolist()} (no error: it paired tensors of different shapes)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
