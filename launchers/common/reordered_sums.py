"""One process training on whole batches, and its fp32 noise floor (notebook 05's
ddp_equivalence.py): not the lesson.

The lesson is DDP against this single process; these functions are the reference it is
compared with: plain SGD with momentum on each batch (summed in `chunks` accumulated parts),
the largest difference between two models, and how far one process moves from itself when
it only sums the same batches in another order (the floor a float32 comparison stands on).
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


def fp32_noise_floor(args, device, batches, single):
    """How far one process moves from itself when it only sums the same batches in another
    order: each batch split into 2, 3 or 4 accumulated parts, reversed, or shuffled."""
    g = torch.Generator().manual_seed(7)
    reorderings = {f"{k} parts": (batches, k) for k in (2, 3, 4)}
    reorderings["reversed"] = ([(x.flip(0), y.flip(0)) for x, y in batches], 1)
    for i in (1, 2):
        shuffled = []
        for x, y in batches:
            order = torch.randperm(len(y), generator=g).to(device)
            shuffled.append((x[order], y[order]))
        reorderings[f"shuffled {i}"] = (shuffled, 1)
    floors = {}
    for label, (these, chunks) in reorderings.items():
        torch.manual_seed(0)
        model = train(Net(args.classes, args.width, "layer").to(device), these, args.lr, "mean",
                      chunks)  # fmt: skip
        floors[label] = max_diff(model, single)
    return floors
