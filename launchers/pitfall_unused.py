"""Notebook 09 §1, unused parameters (BROKEN ON PURPOSE): a branch used every other step.

    torchrun --nproc-per-node 2 launchers/pitfall_unused.py

Notebook 04's CNN gets an auxiliary head, a second classifier on the same features
(NetWithAux in common/pitfall_harness.py), whose loss is added on even steps only. On odd
steps the head's parameters get no gradient, DDP waits for them, and the next forward
refuses to start.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.devices import init_distributed
from common.glyphs import make_dataset
from common.pitfall_harness import NetWithAux, checksum, pitfall_parser, write_metrics
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = pitfall_parser(__doc__)  # --pg-timeout, --device, --out
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device, timeout=args.pg_timeout)

    torch.manual_seed(0)
    model = NetWithAux().to(device)  # Net plus `aux`, a second classifier on its features
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x_all, y_all = make_dataset(args.steps * args.batch_size * world_size, seed=1)

    for step in range(args.steps):
        first = (step * world_size + rank) * args.batch_size
        x, y = x_all[first : first + args.batch_size], y_all[first : first + args.batch_size]
        x, y = x.to(device), y.to(device)
        logits, aux_logits = ddp_model(x, use_aux=step % 2 == 0)  # BUG: aux unused on odd steps
        loss = F.cross_entropy(logits, y)
        if aux_logits is not None:
            loss = loss + 0.3 * F.cross_entropy(aux_logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step}  loss {loss.item():.4f}", flush=True)

    gathered = [None] * world_size
    dist.gather_object({"checksum": checksum(model)}, gathered if rank == 0 else None)
    if rank == 0:
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      steps=args.steps)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
