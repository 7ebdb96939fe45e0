"""One process training on whole batches, and its fp32 noise floor (notebook 05's
ddp_equivalence.py): not the lesson.

The lesson is DDP against this single process; these functions are the reference it is
compared with: plain SGD with momentum on each batch (summed in `chunks` accumulated parts),
the largest difference between two models, and how far one process's runs move from each other
when they only sum the same batches in other orders (the floor a float32 comparison stands on).
"""

import torch
import torch.nn.functional as F
from common.glyphs import Net


def train(model, batches, lr, reduction, chunks=1):
    """SGD with momentum over `batches`; each batch's gradient summed over `chunks` parts."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for x, y in batches:
        optimizer.zero_grad()
        for xc, yc in zip(x.chunk(chunks), y.chunk(chunks), strict=True):
            loss = F.cross_entropy(model(xc), yc, reduction=reduction)
            (loss * len(xc) / len(x) if reduction == "mean" else loss).backward()
        optimizer.step()
    return model


def max_diff(a, b):
    """Largest |a - b| over every parameter of two models."""
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(),
                                                          strict=True))  # fmt: skip


def fp32_noise_floor(args, device, batches, single, ddp_model):
    """How far one process moves from itself when it only sums the same batches in other orders:
    `single` (each batch whole) and runs with each batch split into 2, 3 or 4 accumulated parts,
    reversed, or shuffled. -> (every pair of these orders: their largest difference, and DDP's
    largest difference from each order): a spread, not one comparison with one reference."""
    g = torch.Generator().manual_seed(7)
    reorderings = {f"{k} parts": (batches, k) for k in (2, 3, 4)}
    reorderings["reversed"] = ([(x.flip(0), y.flip(0)) for x, y in batches], 1)
    for i in (1, 2):
        shuffled = []
        for x, y in batches:
            order = torch.randperm(len(y), generator=g).to(device)
            shuffled.append((x[order], y[order]))
        reorderings[f"shuffled {i}"] = (shuffled, 1)
    models = {"whole": single}
    for label, (these, chunks) in reorderings.items():
        torch.manual_seed(0)
        models[label] = train(Net(args.classes, args.width, "layer").to(device), these, args.lr,
                              "mean", chunks)  # fmt: skip
    labels = list(models)
    pairs = {f"{a} | {b}": max_diff(models[a], models[b])
             for i, a in enumerate(labels) for b in labels[i + 1 :]}  # fmt: skip
    return pairs, {label: max_diff(ddp_model, model) for label, model in models.items()}
