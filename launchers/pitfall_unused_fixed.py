"""Notebook 09 §1, unused parameters, fixed two ways, timed side by side.

    torchrun --nproc-per-node 2 launchers/pitfall_unused_fixed.py

(a) `find_unused_parameters=True`: after every forward DDP walks the autograd graph to find
    the parameters that will get no gradient, and marks them ready itself; after backward
    it all-reduces a map of the parameters each rank used (one more collective per step).
(b) the better fix: every parameter takes part in every step (the auxiliary loss is always
    computed, weighted 0 on the steps that do not want it), and DDP needs no search.
They do not train alike under AdamW: in (a) the head, unused on every rank, keeps grad=None
on odd steps and AdamW skips it (Adam._init_group takes only parameters whose grad is not
None, torch/optim/adam.py); in (b) its gradient is zero and AdamW still moves it, by its
momentum and its weight decay.
Both are trained in the same run, step for step alternately, so their step times compare.
timed_step (common/pitfall_harness.py) counts each step's collectives by the process group's
sequence number.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.devices import init_distributed
from common.glyphs import make_dataset
from common.pitfall_harness import NetWithAux, checksum, pitfall_parser, timed_step, write_metrics
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = pitfall_parser(__doc__)  # --pg-timeout, --device, --out
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)

    ids = [device.index] if device.type == "cuda" else None
    variants = {}
    for name in ("find_unused", "always_used"):
        torch.manual_seed(0)
        model = NetWithAux().to(device)  # Net plus `aux`, a second classifier on its features
        ddp_model = DDP(model, device_ids=ids, find_unused_parameters=name == "find_unused")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        variants[name] = (model, ddp_model, optimizer)
    times = {name: [] for name in variants}
    calls = {name: [] for name in variants}  # collectives per step
    x_all, y_all = make_dataset(args.steps * args.batch_size * world_size, seed=1)

    for step in range(args.steps):
        first = (step * world_size + rank) * args.batch_size
        x, y = x_all[first : first + args.batch_size], y_all[first : first + args.batch_size]
        x, y = x.to(device), y.to(device)
        for name, (_model, ddp_model, optimizer) in variants.items():
            with timed_step(device, times[name], calls[name]):  # its seconds and collectives
                if name == "find_unused":  # (a) find_unused_parameters=True: DDP searches
                    logits, aux_logits = ddp_model(x, use_aux=step % 2 == 0)
                    aux_weight = 0.3
                else:  # (b) the branch runs every step; its loss counts on even steps only
                    logits, aux_logits = ddp_model(x, use_aux=True)
                    aux_weight = 0.3 if step % 2 == 0 else 0.0
                loss = F.cross_entropy(logits, y)
                if aux_logits is not None:
                    loss = loss + aux_weight * F.cross_entropy(aux_logits, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        if rank == 0:
            print(f"step {step}  loss {loss.item():.4f}", flush=True)

    gathered = [None] * world_size
    mine = {"checksum": checksum(variants["always_used"][0])}
    dist.gather_object(mine, gathered if rank == 0 else None)
    if rank == 0:
        buckets = {n: v[1]._get_ddp_logging_data()["num_buckets_reduced"]  # in the last step
                   for n, v in variants.items()}
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      steps=args.steps, step_s=times, collectives_per_step=calls,
                      buckets=buckets)
    del variants, ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
