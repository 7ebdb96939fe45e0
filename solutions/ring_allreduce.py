"""Reference solution of the ring exercise of notebook 02 (launchers/ring_allreduce.py).

    torchrun --nproc-per-node 4 launchers/ring_allreduce.py --impl solutions/ring_allreduce.py

ring_all_reduce() is filled in; the rest is the exercise's own. Run it through the exercise, as
above: its check, launchers/nb02/ring_check.py, is imported from beside the launcher.
"""

import sys

import torch  # noqa: F401 - your ring uses it (torch.empty_like)
import torch.distributed as dist


def exchange(send_buf, recv_buf, group=None):
    """Send send_buf to the right neighbour while receiving recv_buf from the left one.

    Both are posted at once: if every rank first sent and then received, every rank could
    wait for its neighbour to receive, forever (NCCL does exactly that).
    """
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    ops = [
        dist.P2POp(dist.isend, send_buf, group=group, group_peer=(rank + 1) % p),
        dist.P2POp(dist.irecv, recv_buf, group=group, group_peer=(rank - 1) % p),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def ring_all_reduce(tensor, group=None):
    """Sum `tensor` over the ranks of `group`, in place (like dist.all_reduce), with a ring.

    The p ranks cut the tensor into p chunks (torch.tensor_split: lengths may differ by one,
    and chunks may be empty when the tensor has fewer than p elements).
    1. reduce-scatter, p - 1 steps: at step s rank r sends its chunk (r - s) % p to the right,
       receives chunk (r - s - 1) % p from the left and adds it to its own chunk.
       Afterwards rank r holds the complete sum of chunk (r + 1) % p.
    2. all-gather, p - 1 steps: at step s rank r sends chunk (r + 1 - s) % p to the right and
       receives chunk (r - s) % p from the left straight into place, overwriting its own.
    """
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    chunks = tensor.view(-1).tensor_split(p)  # views: writing into a chunk writes into tensor
    for step in range(p - 1):  # 1. reduce-scatter
        incoming = torch.empty_like(chunks[(rank - step - 1) % p])
        exchange(chunks[(rank - step) % p], incoming, group)
        chunks[(rank - step - 1) % p].add_(incoming)
    for step in range(p - 1):  # 2. all-gather
        exchange(chunks[(rank + 1 - step) % p], chunks[(rank - step) % p], group)


if __name__ == "__main__":  # the check (not the lesson): launchers/nb02/ring_check.py
    from nb02.ring_check import main

    main(sys.modules[__name__])
