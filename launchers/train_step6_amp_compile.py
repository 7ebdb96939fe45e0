"""The course's DDP training script (notebook 05, step 6 of 6): add --amp and --compile.

    torchrun --nproc-per-node 2 launchers/train_step6_amp_compile.py --epochs 4

Data, model and options: launchers/common/ (`--help`). On GPUs, raise `--width`, `--train-size`.
"""

import argparse
import gc
import itertools
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common.chain_setup import add_chain_options, glyph_splits, same_gpu_kernels, variants
from common.devices import init_distributed
from common.glyphs import Net, lr_at
from common.rank0_log import Rank0Log
from common.run_record import AllreduceCount, StepClock, write_metrics
from torch._dynamo.utils import counters
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from train_step3_checkpoints import load_checkpoint, save_checkpoint  # notebook 04's
from train_step4_evaluation import evaluate  # notebook 04's


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser = add_chain_options(parser, several_runs=True)  # --variant: several runs, one launch
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: only at the end")
    parser.add_argument("--resume", default=None, help="checkpoint to continue from, if it exists")
    parser.add_argument("--fail-at-step", type=int, default=-1, help="the last rank crashes here")
    parser.add_argument("--accum-steps", type=int, default=1,
                        help="K micro-batches of --batch-size per optimizer step (no_sync on K-1)")
    parser.add_argument("--sync-every-micro-step", action="store_true",
                        help="accumulate naively: all-reduce every micro-batch")
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                        help="SGD (momentum 0.9): steps proportional to the gradients")
    parser.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                        help="autocast dtype; fp16 adds a GradScaler (on CPUs too)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the DDP model")
    parser.add_argument("--compile-backend", default="inductor",
                        help="inductor (fused kernels) or eager (graph capture only)")
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    if device.type == "cuda":
        same_gpu_kernels()  # no autotuned cuDNN, no TF32: a resumed run can match
    for run_args in variants(parser, args):  # one process group, one run after another
        counters.clear()  # Dynamo's counts are per process: each run counts its own
        train(run_args, rank, world_size, device, backend)
    dist.destroy_process_group()


def train(args, rank, world_size, device, backend):
    """One run in the process group: a model from the seed, its steps, args.out/metrics.json."""
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = Net(args.classes, args.width, args.norm).to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    train_model = ddp_model
    if args.compile:  # Dynamo cuts its graph where DDP's buckets end (one bucket: no cut)
        train_model = torch.compile(ddp_model, backend=args.compile_backend)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    # fp16 (CPU autocast takes it too): scale the loss up so that small gradients do not
    # round to zero in fp16; the scaler unscales them before the step, skipping it on inf/NaN
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")

    start_step = load_checkpoint(args.resume, model, optimizer, device)  # 0: a new run
    train_set, test_x, test_y = glyph_splits(args)  # generated images: common/glyphs.py
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # rank's share, shuffled
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader) // args.accum_steps
    total_steps = args.epochs * steps_per_epoch
    samples_per_step = args.batch_size * args.accum_steps * world_size

    log = Rank0Log(args.out, rank, total_steps, samples_per_step, start_step)
    n_params = sum(p.numel() for p in model.parameters())
    log.print(f"{args.train_size} training images, {total_steps} steps of {samples_per_step} "
              f"samples over {world_size} rank(s); {n_params} parameters; backend {backend}; "
              f"amp {args.amp}; compile {args.compile}")

    hook = AllreduceCount(ddp_model)  # a comm hook: DDP's all-reduce, counting its buckets
    log.evaluated(start_step, *evaluate(model, test_x, test_y, device))
    seen, step, clock = 0, start_step, StepClock(device)  # clock: each step's time
    for epoch in range(start_step // steps_per_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same permutation on all ranks
        skip = start_step % steps_per_epoch if epoch == start_step // steps_per_epoch else 0
        K = args.accum_steps  # micro-batches per optimizer step
        micro = itertools.islice(loader, skip * K, steps_per_epoch * K)  # resumed: skip some
        for i, (x, y) in enumerate(micro, start=skip * K):
            seen += len(x)
            last_micro = (i + 1) % K == 0
            sync = last_micro or args.sync_every_micro_step
            with nullcontext() if sync else ddp_model.no_sync():  # no_sync: keep grads local
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    loss = F.cross_entropy(train_model(x.to(device)), y.to(device))
                scaler.scale(loss / K).backward()
            if not last_micro:
                continue
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps, args)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            clock.step()
            log.step(step, loss, optimizer.param_groups[0]["lr"], clock.times[-1])
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                if rank == 0:
                    save_checkpoint(os.path.join(args.out, "checkpoint.pt"), model, optimizer, step)
                    print(f"checkpoint step {step} saved", flush=True)
                dist.barrier()  # nobody reads or moves on before the file is complete
            if step == args.fail_at_step and rank == world_size - 1:
                os._exit(13)  # a simulated crash: no exception, no cleanup, the process is gone
        log.epoch_end(epoch, step, loss, *evaluate(model, test_x, test_y, device))
        clock.restart()  # evaluation time is not step time

    if rank == 0:
        save_checkpoint(os.path.join(args.out, "checkpoint.pt"), model, optimizer, step)
    log.close()
    compiled_graphs = 0
    if args.compile:  # how many graphs Dynamo compiled: 0 would mean it compiled nothing
        compiled_graphs = counters["stats"]["unique_graphs"]
    checksum = sum(p.double().sum().item() for p in model.parameters())
    write_metrics(args.out, {"checksum": checksum, "samples_seen": seen},  # gathers: every rank
                  world_size=world_size, backend=backend, steps=step, start_step=start_step,
                  losses=log.losses, evals=log.evals, **clock.figures(), allreduces=hook.count,
                  step_times_s=clock.times[2:] or clock.times,  # first: warm-up, compile
                  amp=args.amp, compile=args.compile, compiled_graphs=compiled_graphs)
    del train_model, ddp_model  # release DDP before the process group (see ddp_first_run.py)
    gc.collect()  # torch.compile keeps DDP in a reference cycle: free it now, not at exit


if __name__ == "__main__":
    main()
