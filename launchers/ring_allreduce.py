"""Exercise: all-reduce built by hand from send/recv, as a ring, checked against dist.all_reduce.

    torchrun --nproc-per-node 4 launchers/ring_allreduce.py [--impl FILE ...]

Fill in ring_all_reduce(). Run as a script, this file checks it (or that of each --impl FILE)
with launchers/nb02/ring_check.py; metrics.json names each ring's first mistake.
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
    1. reduce-scatter, p - 1 steps: each rank sends one chunk to the right and adds the chunk
       it receives from the left into its own copy of that chunk. Afterwards each rank holds
       one chunk summed over all the ranks.
    2. all-gather, p - 1 steps: the summed chunks travel around the ring once more, each one
       received straight into its place, overwriting.
    """
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    chunks = tensor.view(-1).tensor_split(p)  # views: writing into a chunk writes into tensor
    # TODO 1, reduce-scatter: exchange(chunks[...], incoming, group) with a fresh buffer
    # `incoming` (torch.empty_like), then add it to the right chunk
    # TODO 2, all-gather: exchange(chunks[...], chunks[...], group)
    raise NotImplementedError("write the two phases of ring_all_reduce")


if __name__ == "__main__":  # the check (not the lesson): launchers/nb02/ring_check.py
    from nb02.ring_check import main

    main(sys.modules[__name__])
