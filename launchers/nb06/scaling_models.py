"""The models of notebook 06's scaling part and the one-process variants around DDP
(ddp_bench.py): what its variants train and how DataParallel steps, not what it measures.

`mlp` is a few large matmuls, whose kernels release the GIL; `PythonHeavy` puts Python
arithmetic between small layers, per sample. `dp_step_fn` is notebook 01's rebuilt_dp_step
without its ledger; `dataparallel` picks the real nn.DataParallel where it can run;
`all_threads_rounds` times one process with every rank's threads; `model_facts` is what the
memory calculator needs to know of a model.
"""

import copy
import math
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
import torch.nn as nn
from common.bench_rounds import Trainer, loss_of, sync, timed_rounds


def linear_stack(layers, width):
    """Section 4's model: ``layers`` x Linear(width, width), two gradient tensors each."""
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def mlp(width, depth, classes=10):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


class PythonHeavy(nn.Module):
    """Each sample through small layers, with Python arithmetic between them (per-sample
    control flow, as custom research code has): most of its time is the interpreter's."""

    def __init__(self, width=16, layers=8, gate_terms=512, classes=10):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.head = nn.Linear(width, classes)
        self.terms = gate_terms

    def forward(self, x):
        outs = []
        for sample in x.split(1):  # Python work grows with the batch: DDP's ranks split it
            h = sample
            for i, layer in enumerate(self.layers):
                v = h[0, i % h.shape[1]].item()  # a value of this sample, read into Python
                gate = sum(math.cos(v * j) for j in range(self.terms)) / self.terms
                h = h + gate * torch.tanh(layer(h))
            outs.append(h)
        return self.head(torch.cat(outs))


def dp_step_fn(model, batch, width, replicas, device):
    """DataParallel's step, re-implemented with threads in one process: notebook 01's
    rebuilt_dp_step without its ledger. Scatter the batch, replicate the weights, forward on
    each replica's thread, gather the outputs on device 0 and compute the loss there, scatter
    its gradient back, backward on each replica's thread, reduce the gradients onto device 0,
    step there. Only the two parallel phases use the threads."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    pool = ThreadPoolExecutor(replicas)

    def step():
        opt.zero_grad(set_to_none=True)
        chunks = list(x.chunk(replicas))  # scatter: chunk k copied to device k
        chunks = chunks[:1] + [c.clone() for c in chunks[1:]]
        n = len(chunks)
        copies = [model] + [copy.deepcopy(model) for _ in range(1, n)]  # replicate
        outs = list(pool.map(lambda k: copies[k](chunks[k]), range(n)))  # parallel_apply
        gathered = torch.cat([o.detach() for o in outs]).requires_grad_()  # gather on device 0
        loss_of(gathered, y).backward()  # the loss on device 0, over the whole batch
        grads = list(gathered.grad.chunk(n))  # its gradient scattered back
        grads = grads[:1] + [g.clone() for g in grads[1:]]
        list(pool.map(lambda k: outs[k].backward(grads[k]), range(n)))  # parallel backward
        for replica in copies[1:]:  # reduce: every replica's gradients copied to device 0
            for p, q in zip(model.parameters(), replica.parameters(), strict=True):
                p.grad += q.grad.clone()
        opt.step()  # on device 0 only

    return step


def dataparallel(base, batch, width, world, device, cpu):
    """DP's variant: (name, step function on rank 0, why not the real one or None). The real
    nn.DataParallel where this node has a GPU for every rank of the job (NCCL, one node):
    rank 0 drives `world` GPUs, cuda:0..cuda:world-1, in a phase of its own, while the other
    ranks wait on the CPU (gloo) group with nothing running on their GPUs. Else the
    re-implementation on `device`, saying why: the job spans nodes (one process drives its
    own node's GPUs only), or rank 0 cannot use the GPUs the other ranks' processes hold
    (EXCLUSIVE_PROCESS compute mode admits one process per GPU)."""
    name, step, why = f"DP re-implemented, {world} replicas", None, None
    if dist.get_rank() == 0:
        if dist.get_backend() == "nccl" and world > torch.cuda.device_count():
            why = (f"the real nn.DataParallel drives one node's GPUs: {world} ranks, "
                   f"{torch.cuda.device_count()} GPUs on this node")
        elif dist.get_backend() == "nccl" and world > 1:
            try:
                dp = Trainer(nn.DataParallel(copy.deepcopy(base), device_ids=list(range(world))),
                             batch, width, device)
                dp.step()
                sync(device)
                name, step = f"DataParallel, {world} GPUs", dp.step
            except RuntimeError as e:  # e.g. "CUDA-capable device(s) is/are busy or unavailable"
                why = f"the real nn.DataParallel could not use GPUs 1..{world - 1}: {e}"
        if step is None:
            step = dp_step_fn(copy.deepcopy(base), batch, width, world, device)
    shared = [name, why]
    dist.broadcast_object_list(shared, src=0, group=cpu)  # the same variant names on all ranks
    return shared[0], step, shared[1]


def all_threads_rounds(solo_name, solo, base, gbatch, width, args, world, steps, device, rank,
                       cpu):
    """One process with every rank's threads (--threads x N) against `solo`, one process with
    one rank's: the scaling part's MLP on a CPU (threads help CPU kernels: not the python
    model's, nor a GPU's). Timed first, in rounds of their own: changing the thread count after
    DP's threads have run can hang OpenMP."""
    solo_n = Trainer(copy.deepcopy(base), gbatch, width, device)

    def solo_all_threads():
        torch.set_num_threads(args.threads * world)
        solo_n.step()
        torch.set_num_threads(args.threads)

    return timed_rounds({solo_name: (solo.step, {0}),
                         f"1 process, {args.threads * world} threads": (solo_all_threads, {0})},
                        steps, args.rounds, device, rank, cpu)


def saved_bytes_per_sample(model, width, device, batch=8):
    """Bytes autograd keeps for backward, per sample (activations), counted with hooks: the
    tensors saved beyond the parameters (a weight saved by a matmul is no activation), per
    sample as the growth from `batch` to 2 x `batch` samples (the input counted too)."""
    params = {p.data_ptr() for p in model.parameters()}

    def saved(n):
        total = []

        def pack(t):
            if t.data_ptr() not in params:
                total.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(torch.randn(n, width, device=device))
        return sum(total)

    return (saved(2 * batch) - saved(batch)) / batch


def model_facts(model, width, device):
    """What the memory calculator needs to know of a model: parameters, tensors, activations."""
    return {"params": sum(p.numel() for p in model.parameters()),
            "tensors": len(list(model.parameters())),
            "activation_bytes_per_sample": saved_bytes_per_sample(model, width, device)}
