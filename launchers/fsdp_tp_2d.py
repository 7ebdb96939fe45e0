"""2-D parallelism (notebook 12): FSDP2 along one side of a mesh, tensor parallel along the other.

    torchrun --nproc-per-node 4 launchers/fsdp_tp_2d.py --tp 2

tensor_parallel.py's torch plan, with the ranks arranged as a (dp, tp) grid: ranks
(0, 1) and (2, 3) each split every block's matrices (tensor parallel, "tp"), and see the
same samples; the two pairs see different halves of the batch (data parallel, "dp"), with
every tensor-parallel shard sharded again by FSDP2 across the pair ((0, 2) and (1, 3)).
In one step: tensor parallelism's all-reduces run inside each tp group, FSDP2's all-gathers
(parameters, before use) and reduce-scatters (gradients) inside each dp group. The launcher
logs every collective with its group and compares with one process, as tensor_parallel.py.
Options: the model's (tiny_gpt.add_model_args), --tp T (the ranks divide into groups of T),
--device cpu|cuda, --out DIR.
"""

import argparse
import json
import logging
import os

import tiny_gpt
import torch
import torch.distributed as dist
from tensor_parallel import tensor_parallel_with_torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def fsdp_tp_2d(model, mesh):
    """Tensor parallel inside each tp group first, then FSDP2 across each dp group: every
    rank's tensor-parallel shards are sharded once more, between the data-parallel ranks."""
    tensor_parallel_with_torch(model, mesh["tp"])
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])  # one all-gather unit per block
    return fully_shard(model, mesh=mesh["dp"])  # the rest: embeddings, final norm, head


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tiny_gpt.add_model_args(parser)
    parser.add_argument("--tp", type=int, default=2, help="ranks per tensor-parallel group")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.tp < 1 or world_size % args.tp or args.heads % args.tp:
        parser.error(f"--tp {args.tp} must divide the ranks ({world_size}) and --heads "
                     f"({args.heads}): for 4 ranks, --tp 2 makes a 2 x 2 mesh")
    dp = world_size // args.tp
    if args.batch % dp:
        parser.error(f"--batch {args.batch} must split evenly over the {dp} data-parallel groups")
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    os.makedirs(args.out, exist_ok=True)

    # rank = dp_rank * tp + tp_rank: neighbours share the matrices, a stride apart the data
    mesh = init_device_mesh(device.type, (dp, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh.get_local_rank("dp")
    batches = tiny_gpt.make_batches(args)
    reference_losses, reference = tiny_gpt.reference_run(args, batches)
    model = fsdp_tp_2d(tiny_gpt.build_model(args).to(device), mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if rank == 0:
        print(f"2-D: {dp} x {args.tp} mesh (dp x tp) of {world_size} ranks; backend {backend}",
              flush=True)

    groups = {group.group_name: tuple(dist.get_process_group_ranks(group))
              for group in (mesh.get_group("dp"), mesh.get_group("tp"))}
    losses, collectives = [], {}
    for step, (x, y) in enumerate(batches):
        x, y = x.chunk(dp)[dp_rank].to(device), y.chunk(dp)[dp_rank].to(device)
        saved_now, forward_log = tiny_gpt.SavedActivations(model), tiny_gpt.CollectiveLog(groups)
        with saved_now, forward_log:
            loss = tiny_gpt.loss_fn(model(x), y)  # the mean over my dp group's half of the batch
        with tiny_gpt.CollectiveLog(groups) as backward_log:
            loss.backward()  # FSDP2 averages the gradients over the dp groups
        if step == 0:
            saved = saved_now
            collectives = {"forward": forward_log.calls, "backward": backward_log.calls}
            held_grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
            grad_bytes = tiny_gpt.held_bytes(model, optimizer)["grad_bytes"]
        optimizer.step()
        optimizer.zero_grad()
        whole_loss = loss.detach().clone()
        dist.all_reduce(whole_loss)  # each tp group's loss, counted once per tp rank
        losses.append(whole_loss.item() / world_size)
        if rank == 0:
            print(f"step {step}  loss {losses[-1]:.6f}  one process {reference_losses[step]:.6f}",
                  flush=True)

    def whole(tensor):
        return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor

    # gathering a 2-D-sharded weight whole takes two all-gathers, which DTensor warns about:
    # the comparison below needs it once, training never
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    reference_state = dict(reference.named_parameters())
    param_diff = max((whole(p).detach().cpu() - reference_state[n].detach()).abs().max().item()
                     for n, p in model.named_parameters())
    reference_grads = tiny_gpt.first_step_gradients(args, batches[0])
    grad_diff = max((whole(g).cpu() - reference_grads[n]).abs().max().item()
                    for n, g in held_grads.items())
    held = {"rank": rank, "dp_rank": dp_rank, "tp_rank": mesh.get_local_rank("tp"),
            **tiny_gpt.held_bytes(model, optimizer), "grad_bytes": grad_bytes,
            "activation_bytes": saved.peak, "collectives": collectives,
            "grad_max_diff": grad_diff, "param_max_diff": param_diff,
            "device_peak_bytes": tiny_gpt.device_peak_bytes(device)}
    gathered = [None] * world_size
    dist.gather_object(held, gathered if rank == 0 else None)
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "mesh": [dp, args.tp],
                       "ranks": gathered,
                       **tiny_gpt.run_summary(args, losses, reference_losses, reference)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
