"""Scoring a model on the held-out test set (notebook 04's training chain): not its lesson.

`score_totals` adds up one rank's correct answers, loss and count; `evaluate` turns them into
accuracy and mean loss on one rank alone, as steps 1 to 3 do. From step 4 on, a launcher's own
evaluate shares the test set between the ranks and all-reduces these totals: the lesson.
"""

import torch
import torch.nn.functional as F


@torch.no_grad()
def score_totals(model, x, y, device, batch_size=512):
    """float64 (correct answers, summed loss, count) of `model` in eval mode on x, y."""
    totals = torch.zeros(3, dtype=torch.float64, device=device)
    model.eval()
    for i in range(0, len(x), batch_size):
        xb, yb = x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)
        logits = model(xb)
        totals[0] += (logits.argmax(1) == yb).sum()
        totals[1] += F.cross_entropy(logits, yb, reduction="sum")
        totals[2] += len(yb)
    model.train()
    return totals


def evaluate(model, x, y, device):
    """(accuracy, mean loss) on the whole test set, scored by this rank alone."""
    totals = score_totals(model, x, y, device)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()
