"""The check of notebook 02's ring exercise (launchers/ring_allreduce.py): not its lesson.

With 4 ranks it tries every world size from 1 to 4 (process groups of the first k ranks) and
sizes chosen to be awkward (odd, prime, smaller than the number of ranks), and compares each
ring's result with the library's dist.all_reduce using torch.testing.assert_close, in float64
(only the order of the additions differs). It also counts the exchanges of one call, and runs
a probe whose numbers say which ranks and which position they came from: what each rank holds
after p - 1 exchanges and at the end. From those facts metrics.json names each ring's first
mistake. The exercise runs main() with itself as the ring to check; so do its reference
(solutions/ring_allreduce.py) and the tests' planted rings, which are the same file but for
ring_all_reduce.
"""

import argparse
import importlib.util
import json
import os
import traceback

import torch
import torch.distributed as dist
from common.devices import init_distributed


class Watch:
    """Wraps a ring module's exchange(): first the ranks compare the sizes sent and received
    into (a mismatch raises Watch.Mismatch on every rank of the group, where the backend would
    abort the process), then it counts the exchanges and which received straight into the
    probe's tensor, and keeps that tensor as it was after the reduce-scatter's k - 1."""

    class Mismatch(Exception):
        pass

    def __init__(self, module):
        self.exchange, self.into, self.tensor, self.snapshot = module.exchange, [], None, None
        module.exchange = self

    def __call__(self, send_buf, recv_buf, group=None):
        x, p = self.tensor, dist.get_world_size(group)
        if x is not None and len(self.into) == p - 1:
            self.snapshot = x.tolist()
        self.into.append(x is not None and x.data_ptr() <= recv_buf.data_ptr()
                         < x.data_ptr() + x.numel() * x.element_size())  # fmt: skip
        if p == 1:  # the backends refuse to send to oneself
            raise self.Mismatch("with p = 1 rank it called exchange, which would send to "
                                "itself: a ring of one makes p-1 = 0 steps (does a loop run p "
                                "times?)")  # fmt: skip
        size = torch.tensor([float(send_buf.numel())], device=send_buf.device)
        sent = torch.zeros_like(size)
        self.exchange(size, sent, group)  # what the left neighbour is about to send
        bad = torch.tensor([float(dist.get_rank(group) + 1) * (sent.item() != recv_buf.numel())],
                           device=send_buf.device)  # fmt: skip
        dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=group)
        if bad.item():
            raise self.Mismatch(f"at p = {p} ranks, exchange {len(self.into)}: rank "
                                f"{int(bad.item()) - 1} was to receive a chunk into a buffer of "
                                "another size: the sender and the receiver picked different "
                                "chunks (their indices differ)")  # fmt: skip
        return self.exchange(send_buf, recv_buf, group)

    def probe(self, ring, group, k, rank, device):
        """One call on k elements where rank q adds BASE**q and element i adds i * BASE**k:
        each number then says which ranks were summed into it, how often, and from where."""
        base = 2 * k + 2
        x = (base**rank + torch.arange(k, dtype=torch.float64) * base**k).to(device)
        self.into, self.tensor, self.snapshot = [], x, None
        try:
            ring(x, group=group)
        finally:
            self.tensor = None
        return {"exchanges": len(self.into), "into_tensor": sum(self.into), "after": x.tolist(),
                "after_reduce_scatter": self.snapshot}


def verdict(cases, probes, raised, world_size):
    """(ok, message): ok None while the ring raises NotImplementedError (the starter as given),
    else the first mistake the facts show, named."""

    def decode(value, k):  # a probe's number: how often each rank's values, and the position sum
        base = 2 * k + 2
        high, low = divmod(round(value), base**k)
        return [(low // base**q) % base for q in range(k)], high

    if raised:
        if raised.startswith("Mismatch: "):
            return False, raised.removeprefix("Mismatch: ")
        if raised.startswith("NotImplementedError"):
            return None, "write the two phases of ring_all_reduce, run its cell, then this one"
        hint = ("; fewer than p chunks? tensor.chunk(p) makes fewer when the size does not "
                "split, tensor_split(p) always p" if raised.startswith("IndexError") else "")
        return False, f"it raised {raised}{hint}"
    failed = [c for c in cases if not c["ok"]]
    if world_size < 2:
        return not failed, ""
    k, steps = world_size, world_size - 1
    first = probes[str(k)][0]
    made, into = first["exchanges"], first["into_tensor"]
    fresh, at = made - into, f"at p = {k} ranks"
    if not failed:
        if made > 2 * steps:
            phase = ("the reduce-scatter" if fresh > steps else "the all-gather" if into > steps
                     else "a phase")
            return False, (f"right sums, but {made} exchanges {at} where 2(p-1) = {2 * steps} "
                           f"are enough: {phase} makes a step too many (p-1 complete it)")
        return True, ""
    where = []  # (rank, element, counts, from its own position) of every wrong probe number
    for r, held in enumerate(probes[str(k)]):
        for i, value in enumerate(held["after"]):
            counts, high = decode(value, k)
            if counts != [1] * k or high != i * k:
                where.append((r, i, counts, high == i * sum(counts)))
    if not where:
        c = failed[0]
        return False, (f"wrong with {c['numel']} elements {at} (max |ring - library| = "
                       f"{c['max_abs_err']:.2g}): chunks of unequal or zero length; cut with "
                       "tensor_split(p)")
    r, i, counts, placed = where[0]
    held = f"rank {r}'s chunk {i} ends with " + ", ".join(
        f"{n}x rank {q}'s values" for q, n in enumerate(counts) if n)
    if made and fresh == 0:
        return False, (f"{held}: the reduce-scatter received straight into the chunks, which "
                       "replaces the partial sums; receive into a fresh buffer, then add it")
    if made and into == 0 and fresh == steps:
        return False, (f"only {made} exchanges {at}, the reduce-scatter's: {held}; the "
                       "all-gather must pass the summed chunks around, p-1 more steps")
    if made and into == 0 and max(counts) > 1:
        return False, (f"{held}: the all-gather added what it received; it must replace it "
                       "(receive straight into the chunk)")
    if made and fresh != steps:
        return False, (f"the reduce-scatter made {fresh} step{'s' * (fresh != 1)} {at}, "
                       f"p-1 = {steps} needed: {held}")
    if made and into != steps:
        return False, (f"the all-gather made {into} step{'s' * (into != 1)} {at}, p-1 = {steps} "
                       f"needed: {held}")
    if not placed:
        return False, (f"{held}, summed from other positions: a step received a chunk into "
                       "another chunk's place (the sender's and the receiver's index differ)")
    complete = [any(decode(v, k)[0] == [1] * k for v in p["after_reduce_scatter"])
                for p in probes[str(k)] if p["after_reduce_scatter"]]
    if complete and all(complete):
        return False, (f"after the reduce-scatter each rank held a complete chunk, then the "
                       f"all-gather overwrote sums with partial ones: {held}; receive the "
                       "chunk your left neighbour completed, into its own place")
    return False, (f"after the reduce-scatter's p-1 steps no rank held a complete chunk: "
                   f"{held}; check which chunk each step sends and adds")


def main(own):
    """Check the ring_all_reduce() of module `own` (the script torchrun runs), or with --impl
    that of each FILE instead, all in one run; rank 0 writes metrics.json."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3, 5, 7, 13, 1001, 4099],
                        help="numbers of elements to check (odd on purpose)")
    parser.add_argument("--impl", action="append", help="check FILE's ring_all_reduce (repeatable; "
                        "default: the script's own)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    # gloo copies CUDA tensors through host memory for its collectives, but its send/recv
    # take CPU tensors only: with gloo (ranks sharing a GPU) the tensors stay on the CPU
    device = device if backend == "nccl" else torch.device("cpu")

    groups = [dist.new_group(list(range(k))) for k in range(1, world_size + 1)]  # all ranks
    mine = []  # per ring: the cases (group size, tensor size) and probes as this rank saw them
    for path in args.impl or [None]:
        module = own  # the script's own ring, or FILE's
        if path:
            spec = importlib.util.spec_from_file_location(f"ring_{len(mine)}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        ring, watch = module.ring_all_reduce, Watch(module)
        cases, probes, raised, stop = [], {}, None, torch.zeros(1, device=device)
        for k, group in enumerate(groups, start=1):
            if rank < k and not stop.item():
                try:
                    if k > 1:
                        probes[k] = watch.probe(ring, group, k, rank, device)
                    for numel in args.sizes:
                        generator = torch.Generator().manual_seed(1000 * rank + numel)
                        # float64: the ring and the library differ only in the order of additions
                        x = torch.randn(numel, generator=generator, dtype=torch.float64).to(device)
                        expected = x.clone()
                        dist.all_reduce(expected, group=group)  # the library's answer
                        ring(x, group=group)  # yours, in place
                        try:
                            torch.testing.assert_close(x, expected)
                            ok, why = True, ""
                        except AssertionError as err:
                            ok, why = False, str(err).splitlines()[0]
                        err_max = (x - expected).abs().max().item() if numel else 0.0
                        cases.append({"world_size": k, "numel": numel, "ok": ok,
                                      "max_abs_err": err_max, "why": why})
                except Exception as err:  # the ring's own error: named, then the next ring
                    frames = [f for f in traceback.extract_tb(err.__traceback__)
                              if path and os.path.abspath(f.filename) == os.path.abspath(path)]
                    at = (f" (at line {frames[-1].lineno}: {frames[-1].line})" if frames and
                          not isinstance(err, NotImplementedError) else "")  # fmt: skip
                    raised = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}{at}"
            stop.fill_(raised is not None)
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # one rank raised: all go on to the next
        mine.append({"impl": path, "cases": cases, "probes": probes, "raised": raised})

    per_rank = [None] * world_size
    dist.all_gather_object(per_rank, {"rank": rank, "rings": mine})
    if rank == 0:
        rings = []
        for i, path in enumerate(args.impl or [None]):
            # a case passes when every rank of its group got the library's answer
            merged = {}
            for record in per_rank:
                for case in record["rings"][i]["cases"]:
                    key = (case["world_size"], case["numel"])
                    seen = merged.setdefault(key, {**case, "failed_ranks": []})
                    seen["ok"] = seen["ok"] and case["ok"]
                    seen["max_abs_err"] = max(seen["max_abs_err"], case["max_abs_err"])
                    if not case["ok"]:
                        seen["failed_ranks"].append(record["rank"])
                        seen["why"] = seen["why"] or case["why"]
            checked = list(merged.values())
            raised = next((r["rings"][i]["raised"] for r in per_rank if r["rings"][i]["raised"]),
                          None)  # fmt: skip
            probes = {str(k): [r["rings"][i]["probes"][k] for r in per_rank[:k]]
                      for k in range(2, world_size + 1) if not raised}  # fmt: skip
            ok, message = verdict(checked, probes, raised, world_size)
            name = os.path.basename(path) if path else "ring_all_reduce"
            print(f"{name}: " + (f"all {len(checked)} cases match dist.all_reduce" if ok
                                 else message), flush=True)  # fmt: skip
            rings.append({"impl": path, "cases": checked, "raised": raised,
                          "all_passed": bool(ok), "verdict": [ok, message]})
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend,
                       "ranks": [{"rank": r["rank"]} for r in per_rank], "rings": rings,
                       "cases": rings[0]["cases"], "all_passed": rings[0]["all_passed"]}, f)
    dist.destroy_process_group()

