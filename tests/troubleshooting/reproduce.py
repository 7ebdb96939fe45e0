"""The messages of docs/troubleshooting.md, produced on this machine's torch (CPU, gloo).

    python tests/troubleshooting/reproduce.py one-rank OUT.json     # every one-process case
    torchrun --nproc-per-node 2 tests/troubleshooting/reproduce.py two-rank CASE OUT.json

Each case makes the mistake the page describes and records the message torch gives for it,
so the page's quotes are checked against the pinned torch, not against memory.
"""

import datetime
import io
import json
import os
import socket
import sys
import zipfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_rank_group() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)  # fmt: skip


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x)


def unused_parameters():
    one_rank_group()
    model = DDP(Unused())
    for _ in range(2):  # the second iteration finds the first one's reduction unfinished
        model(torch.randn(2, 4)).sum().backward()


def module_prefix():
    one_rank_group()
    nn.Linear(4, 2).load_state_dict(DDP(nn.Linear(4, 2)).state_dict())  # saved through DDP


def ddp_attribute():
    one_rank_group()
    DDP(nn.Linear(4, 2)).generate()  # a method of the wrapped model, asked of the wrapper


def no_process_group():
    dist.all_reduce(torch.ones(1))


def batchnorm_one_sample():
    nn.BatchNorm1d(8).train()(torch.randn(1, 8))  # a rank's share of a small batch: 1 sample


def port_in_use(port: int):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        dist.TCPStore("127.0.0.1", port, 1, True, wait_for_workers=False)


def wrong_interface():
    os.environ["GLOO_SOCKET_IFNAME"] = "eth9"  # an interface this machine does not have
    try:
        one_rank_group()
    finally:
        del os.environ["GLOO_SOCKET_IFNAME"]


def saved_on_gpu_loaded_on_cpu():
    """The bytes torch.save writes for a tensor on cuda:0 differ from a CPU save only in the
    storage's location tag: the tag is rewritten here, as a GPU machine would have written it."""
    buf = io.BytesIO()
    torch.save({"weight": torch.ones(3)}, buf)
    cpu_save, gpu_save = zipfile.ZipFile(io.BytesIO(buf.getvalue())), io.BytesIO()
    with zipfile.ZipFile(gpu_save, "w", zipfile.ZIP_STORED) as out:
        for info in cpu_save.infolist():
            data = cpu_save.read(info)
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            out.writestr(info, data)
    gpu_save.seek(0)
    torch.load(gpu_save)


ONE_RANK = {"unused_parameters": unused_parameters, "module_prefix": module_prefix,
            "ddp_attribute": ddp_attribute, "no_process_group": no_process_group,
            "batchnorm_one_sample": batchnorm_one_sample, "wrong_interface": wrong_interface,
            "saved_on_gpu_loaded_on_cpu": saved_on_gpu_loaded_on_cpu}  # fmt: skip


def run_one_rank(out: str) -> None:
    messages = {}
    cases = {**ONE_RANK, "port_in_use": lambda: port_in_use(free_port())}
    for name, case in cases.items():
        try:
            case()
            messages[name] = "(no error)"
        except Exception as e:  # the message is the point
            messages[name] = f"{type(e).__name__}: {e}"
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(messages, f, indent=1)


def run_two_ranks(case: str, out: str) -> None:
    """Rank 0 does what a single rank must not do alone; both ranks record what they got."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))  # a buffer to broadcast
    try:
        if case == "evaluate_on_rank0_through_ddp":
            if rank == 0:
                model.eval()
                model(torch.randn(8, 4))  # DDP's forward broadcasts buffers: a collective
            dist.barrier()
        elif case == "uneven_inputs":
            for _ in range(3 if rank == 0 else 2):  # rank 0 has one batch more
                model(torch.randn(8, 4)).sum().backward()
            dist.barrier()
        message = "(no error)"
    except Exception as e:
        message = f"{type(e).__name__}: {e}"
    with open(f"{out}.rank{rank}", "w") as f:
        f.write(message)
    os._exit(0)  # the group is broken: destroying it would wait on the other rank again


if __name__ == "__main__":
    if sys.argv[1] == "one-rank":
        run_one_rank(sys.argv[2])
    else:
        run_two_ranks(sys.argv[2], sys.argv[3])
