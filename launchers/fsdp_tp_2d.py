"""2-D parallelism (notebook 12): FSDP2 along one side of a mesh, tensor parallel along the other.

    torchrun --nproc-per-node 4 launchers/fsdp_tp_2d.py --tp 2

tensor_parallel.py's torch plan, with the ranks arranged as a (dp, tp) grid: ranks
(0, 1) and (2, 3) each split every block's matrices (tensor parallel, "tp"), and see the
same samples; the two pairs see different halves of the batch (data parallel, "dp"), with
every tensor-parallel shard sharded again by FSDP2 across the pair ((0, 2) and (1, 3)).
In one step: tensor parallelism's all-reduces run inside each tp group, FSDP2's all-gathers
(parameters, before use) and reduce-scatters (gradients) inside each dp group. The launcher
logs every collective with its group and compares with one process, as tensor_parallel.py
(nb12/layout_runs.py). Options: the model's (tiny_gpt.add_model_args), --tp T (the ranks
divide into groups of T), --device cpu|cuda, --out DIR.
"""

import argparse
import os

import torch
import torch.distributed as dist
from common.devices import init_distributed
from nb12 import layout_runs, tiny_gpt
from tensor_parallel import tensor_parallel_with_torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


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
    device, backend = init_distributed(args.device)

    # rank = dp_rank * tp + tp_rank: neighbours share the matrices, a stride apart the data
    mesh = init_device_mesh(device.type, (dp, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh.get_local_rank("dp")
    batches = tiny_gpt.make_batches(args)
    reference = tiny_gpt.reference_run(args, batches)  # one process: (losses, trained model)
    model = fsdp_tp_2d(tiny_gpt.build_model(args).to(device), mesh)
    if rank == 0:
        print(f"2-D: {dp} x {args.tp} mesh (dp x tp) of {world_size} ranks; backend {backend}",
              flush=True)

    def whole_loss(loss):
        """Each rank's loss is the mean over its dp group's half of the batch (FSDP2 averages
        the gradients over the dp groups): the whole batch's, each tp group's counted once
        per tp rank."""
        total = loss.detach().clone()
        dist.all_reduce(total)
        return total.item() / world_size

    groups = {group.group_name: tuple(dist.get_process_group_ranks(group))
              for group in (mesh.get_group("dp"), mesh.get_group("tp"))}
    run = layout_runs.train_and_compare(
        model, args, batches, reference, device, groups,
        part=lambda x, y: (x.chunk(dp)[dp_rank], y.chunk(dp)[dp_rank]),  # my dp group's half
        loss_of=whole_loss, dp_rank=dp_rank, tp_rank=mesh.get_local_rank("tp"))
    layout_runs.write_metrics(args.out, {"world_size": world_size, "backend": backend,
                                         "mesh": [dp, args.tp], **run})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
