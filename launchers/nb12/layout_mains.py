"""The command lines and runs of tensor_parallel.py and pipeline_parallel.py (notebook 12).

Not their lesson: each launcher holds its split (Megatron's f and g and torch's plan; the
Stage, the schedules, the step with send and recv and torch's pipelining) and hands it to its
main here, which parses the options, joins the process group, makes the batches and the
one-process run, trains each requested split in turn from the same weights
(nb12/layout_runs.py: beside one process, compared in float64) and writes metrics.json.
"""

import argparse
import os

import torch
import torch.distributed as dist
from common.devices import device_and_backend, init_distributed

from nb12 import layout_runs, tiny_gpt


def layout_parser(doc, batch=True):
    """The options both launchers share: the model's (tiny_gpt.add_model_args), --device, --out."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    tiny_gpt.add_model_args(parser, batch=batch)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default: cuda where there is one)")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    return parser


def join(unit, world_size, device):
    """Under torchrun: this rank's device and backend, the process group joined."""
    device, backend = init_distributed(device)
    if dist.get_rank() == 0:
        print(f"{world_size} {unit}(s), backend {backend}", flush=True)
    return device, backend


def tensor_parallel_main(doc, split):
    """tensor_parallel.py's main: each --impl trains a fresh model that ``split`` cut.
    ``split(impl, model, device)`` cuts it in place and returns {parameter name: the dim cut}."""
    parser = layout_parser(doc)
    parser.add_argument(
        "--impl", nargs="+", choices=["hand", "torch", "torch-linears"], default=["hand"],
        help="one or more, each trained in turn in the same processes from the same weights: "
             "hand (Megatron's f and g, sliced Linears), torch (the same split as a plan, "
             "torch.distributed.tensor.parallel on a device mesh), torch-linears (the plan for "
             "the Linears alone: q, k and v each all-reduce their input's gradient)")
    args = parser.parse_args()
    world_size = int(os.environ["WORLD_SIZE"])
    if args.heads % world_size:
        parser.error(f"--heads {args.heads} must be a multiple of the ranks ({world_size}): "
                     "each rank computes whole heads")
    device, backend = join("rank", world_size, args.device)
    rank = dist.get_rank()
    # the same batches on every rank: tensor parallelism splits the model, not the data
    batches = tiny_gpt.make_batches(args)
    reference = tiny_gpt.reference_run(args, batches)  # one process: (losses, trained model)
    group = {dist.group.WORLD.group_name: tuple(range(world_size))}
    runs = {}
    for impl in args.impl:
        model = tiny_gpt.build_model(args).to(device)
        dims = split(impl, model, device)
        if rank == 0:
            print(f"tensor parallel ({impl}): {sum(p.numel() for p in reference[1].parameters())}"
                  f" parameters over {world_size} rank(s)", flush=True)

        def mine(name, full, dims=dims):
            """This rank's part of a reference tensor, as this layout holds it."""
            return full.chunk(world_size, dims[name])[rank] if name in dims else full

        runs[impl] = {"impl": impl, **layout_runs.train_and_compare(
            model, args, batches, reference, device, group, mine=mine)}
    layout_runs.write_metrics(args.out, {"world_size": world_size, "backend": backend,
                                         "runs": runs})
    dist.destroy_process_group()


def parse_run(spec):
    """pipeline_parallel.py's --runs: 'hand:1f1b:4' -> ('hand', '1f1b', 4), or what to fix."""
    parts = spec.split(":")
    if (len(parts) != 3 or parts[0] not in ("hand", "torch") or parts[1] not in ("gpipe", "1f1b")
            or not parts[2].isdigit() or int(parts[2]) < 1):
        raise argparse.ArgumentTypeError(
            f"{spec!r}: give IMPL:SCHEDULE:M, IMPL hand or torch, SCHEDULE gpipe or 1f1b, "
            "M micro-batches (1 or more), e.g. hand:1f1b:4")
    return parts[0], parts[1], int(parts[2])


def pipeline_main(doc, stage_class, by_hand, orders, with_torch):
    """pipeline_parallel.py's main: each of --runs trains a fresh stage, by hand or by torch.
    ``stage_class(model, rank, stages)`` makes the stage; ``by_hand`` steps it in the order
    ``orders[SCHEDULE]`` gives, or ``with_torch(stage, SCHEDULE, M, device)`` returns the step."""
    parser = layout_parser(doc, batch=False)  # each run's batch: M x --micro-batch
    parser.add_argument(
        "--runs", nargs="+", type=parse_run, default=[("hand", "1f1b", 4)],
        metavar="IMPL:SCHEDULE:M",
        help="one or more, each trained in turn in the same processes from the same weights: "
             "IMPL hand (the schedule written out with send and recv) or torch "
             "(torch.distributed.pipelining), SCHEDULE gpipe (all forwards, then all backwards) "
             "or 1f1b (fill the pipe, then one forward, one backward), M micro-batches of "
             "--micro-batch samples each")
    parser.add_argument("--micro-batch", type=int, default=2, help="samples per micro-batch")
    args = parser.parse_args()
    stages = int(os.environ["WORLD_SIZE"])
    if args.layers < stages:
        parser.error(f"--layers {args.layers}: each of the {stages} stages needs a block")
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    _, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                    int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if backend == "gloo" and args.device == "cuda" and any(r[0] == "torch" for r in args.runs):
        parser.error("--runs torch:...: torch.distributed.pipelining sends through the process "
                     "group, and gloo (the ranks share GPUs here) takes CPU tensors only: run "
                     "the torch schedules with --device cpu, or with one rank per GPU")
    device, backend = join("stage", stages, args.device)
    runs = {}
    for impl, schedule_name, m in args.runs:
        run_args = argparse.Namespace(**vars(args), batch=m * args.micro_batch)
        runs[f"{impl}:{schedule_name}:{m}"] = train_pipeline(
            impl, schedule_name, m, run_args, device, stage_class, by_hand, orders, with_torch)
    layout_runs.write_metrics(args.out, {"world_size": stages, "backend": backend, "runs": runs})
    dist.destroy_process_group()


def train_pipeline(impl, schedule_name, microbatches, args, device, stage_class, by_hand, orders,
                   with_torch):
    """One pipeline run: a fresh stage, the run's batches and schedule, compared with one process.
    Returns this rank's figures gathered on rank 0, and the run's."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    batches = tiny_gpt.make_batches(args)
    reference_losses, reference = tiny_gpt.reference_run(args, batches)
    stage = stage_class(tiny_gpt.build_model(args), rank, stages).to(device)
    optimizer = torch.optim.AdamW(stage.parameters(), lr=args.lr)
    if impl == "hand":
        # the device the backend sends from: the stage's under NCCL; the CPU under gloo, which
        # takes CPU tensors only, also when the stages compute on GPUs
        wire = device if dist.get_backend() == "nccl" else torch.device("cpu")
        order = orders[schedule_name](microbatches, rank, stages)

        def run_step(x, y, clock):  # -> (the loss, on the last stage; the timeline)
            return by_hand(stage, order, x.chunk(microbatches), y.chunk(microbatches), rank,
                           stages, clock, wire)
    else:
        run_step = with_torch(stage, schedule_name, microbatches, device)
    if rank == 0:
        print(f"pipeline ({impl}, {schedule_name}): {stages} stage(s), {microbatches} "
              f"micro-batches of {args.batch // microbatches}", flush=True)

    losses, first_grads, figures = layout_runs.train_pipeline(
        stage, optimizer, batches, reference_losses, device, run_step)
    gathered = layout_runs.gather_figures(  # and the differences from one process
        stage, optimizer, first_grads, args, batches, reference, device,
        blocks=[int(i) for i in stage.blocks], **figures)
    return {"impl": impl, "schedule": schedule_name, "microbatches": microbatches,
            "ranks": gathered, **tiny_gpt.run_summary(args, losses, reference_losses, reference)}
