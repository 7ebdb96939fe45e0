"""Notebook 12's model, data and measuring tools, imported by its launchers: not their lesson.

Not a launcher: the small GPT-style transformer that tensor_parallel.py, pipeline_parallel.py
and fsdp_tp_2d.py split (how they split it is their lesson), the token data they train on
(made here, nothing downloaded), the one-process run they must reproduce, and the two
instruments the lesson reads: the bytes autograd keeps for backward, and the collectives a
step runs. nb12/layout_runs.py trains a split copy with them.
"""

import math
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class Attention(nn.Module):
    """Causal multi-head self-attention, written out (no fused kernel: what it keeps for
    backward is plain to count). Heads are found from the width of q, so the same forward
    runs a tensor-parallel rank's share of the heads."""

    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(self.mix(self.q(x), self.k(x), self.v(x)))

    def mix(self, q, k, v):
        """softmax(q k^T / sqrt(d) + causal mask) v, head by head: (B, T, h*d) -> (B, T, h*d)."""
        B, T, width = q.shape
        q, k, v = (t.view(B, T, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        scores = scores + torch.zeros_like(future, dtype=q.dtype).masked_fill(future, -math.inf)
        return (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, width)


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc, self.proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.ln2, self.mlp = nn.LayerNorm(dim), MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token and position embeddings, `layers` blocks, a final norm, a separate head."""

    def __init__(self, vocab=64, dim=128, heads=4, layers=4, seq=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def add_model_args(parser, batch=True):
    """The model's and the data's size, the same options in every launcher of notebook 12
    (the pipeline sets each run's batch from its micro-batches: batch=False)."""
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64, help="tokens per sample")
    if batch:
        parser.add_argument("--batch", type=int, default=8, help="samples per step (global)")
    parser.add_argument("--steps", type=int, default=3, help="AdamW steps")
    parser.add_argument("--lr", type=float, default=1e-3)


def build_model(args):
    """Every layout starts from the same weights: seed 0, float64 (the comparisons)."""
    torch.manual_seed(0)
    return TinyGPT(args.vocab, args.dim, args.heads, args.layers, args.seq).double()


def make_batch(n, seq, vocab, seed):
    """n sequences that count up by a step of 1-3 modulo vocab from a random start: the next
    token follows from the ones before. Returns (inputs, targets), targets shifted by one."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(vocab, (n, 1), generator=g)
    stride = torch.randint(1, 4, (n, 1), generator=g)
    tokens = (start + stride * torch.arange(seq + 1)) % vocab
    return tokens[:, :-1], tokens[:, 1:]


def make_batches(args):
    """One batch per step, the same on every rank: each layout decides what it computes."""
    return [make_batch(args.batch, args.seq, args.vocab, seed=step) for step in range(args.steps)]


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def reference_run(args, batches):
    """One process, the whole model, every batch whole: the losses and the trained weights
    every parallel layout must reproduce."""
    model = build_model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses = []
    for x, y in batches:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, model


def first_step_gradients(args, batch):
    """The one-process gradients of the first step: one backward of `batch` from the start."""
    model = build_model(args)
    loss_fn(model(batch[0]), batch[1]).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def run_summary(args, losses, reference_losses, reference):
    """What every launcher of notebook 12 reports besides its ranks' figures."""
    return {"losses": losses, "reference_losses": reference_losses,
            "loss_max_diff": max(abs(a - b) for a, b in zip(losses, reference_losses, strict=True)),
            "n_params": sum(p.numel() for p in reference.parameters()),
            "model": {k: getattr(args, k) for k in ("vocab", "dim", "heads", "layers", "seq",
                                                    "batch")}}


def local(tensor):
    """This rank's own piece of a tensor: a DTensor's local shard, or the tensor itself."""
    return tensor._local_tensor if isinstance(tensor, DTensor) else tensor


def held_bytes(model, optimizer):
    """Bytes of parameters, gradients and optimizer state this rank stores, tensor by tensor."""
    return {"param_bytes": sum(local(p).nbytes for p in model.parameters()),
            "grad_bytes": sum(local(p.grad).nbytes for p in model.parameters()
                              if p.grad is not None),
            "optimizer_bytes": sum(local(v).nbytes for state in optimizer.state.values()
                                   for v in state.values() if torch.is_tensor(v) and v.dim())}


def device_peak_bytes(device):
    """The GPU's peak of allocated bytes (all tensors), None on a CPU: there the ledgers
    here are the whole story."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


class SavedActivations(torch.autograd.graph.saved_tensors_hooks):
    """Counts the bytes autograd keeps for backward, live: a tensor counts from the forward
    that saves it until the backward that frees it (each storage once; parameters and the
    model's buffers left out). `peak` is the largest total seen: the activation memory."""

    def __init__(self, model):
        self.model = model
        self.exclude = self._weights()
        self.users = {}  # storage -> [bytes, how many saved tensors use it]
        self.live = self.peak = 0
        super().__init__(self._pack, lambda held: held.tensor)

    def __enter__(self):
        super().__enter__()
        return self

    def _weights(self):
        return {local(t).untyped_storage().data_ptr()
                for t in [*self.model.parameters(), *self.model.buffers()]}

    def _pack(self, tensor):
        held = _Held(tensor)
        storage = local(tensor).untyped_storage()
        key = storage.data_ptr()
        if key not in self.exclude:  # FSDP2 gathers whole weights during forward: look again
            self.exclude = self._weights()  # (afresh: a freed weight's address is reused)
        if key not in self.exclude and storage.nbytes():
            entry = self.users.setdefault(key, [storage.nbytes(), 0])
            if entry[1] == 0:
                self.live += entry[0]
                self.peak = max(self.peak, self.live)
            entry[1] += 1
            weakref.finalize(held, self._release, key)  # autograd drops it after backward
        return held

    def _release(self, key):
        entry = self.users[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self.users[key]


class _Held:
    """What autograd keeps instead of the tensor: freed when backward no longer needs it."""

    def __init__(self, tensor):
        self.tensor = tensor


class CollectiveLog(TorchDispatchMode):
    """Records every collective run inside it: its name, the ranks of its group, its bytes.
    It sees torch.distributed's calls and DTensor's alike (both reach torch's dispatcher)."""

    def __init__(self, group_ranks):
        super().__init__()
        self.group_ranks = group_ranks  # group name -> its ranks (tuple)
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        if any(isinstance(a, DTensor) for a in flat):
            return NotImplemented  # let DTensor turn the op into local ops and collectives
        name = func._opname.strip("_")
        if func.namespace in ("c10d", "_c10d_functional") and any(
                word in name for word in ("reduce", "gather", "scatter", "broadcast", "send",
                                          "recv", "all_to_all")):
            self.calls.append({"op": name, "ranks": self._ranks(flat),
                               "bytes": max((a.nbytes for a in flat if isinstance(a, torch.Tensor)),
                                        default=0)})  # the whole: gathered or to scatter
        return func(*args, **kwargs)

    def _ranks(self, flat):
        """The ranks of the group a collective runs on: DTensor's ops name it, those of
        torch.distributed pass the ProcessGroup itself."""
        for a in flat:
            if isinstance(a, torch.ScriptObject):
                a = dist.ProcessGroup.unbox(a).group_name
            if isinstance(a, str) and a in self.group_ranks:
                return self.group_ranks[a]
        return None
