"""Notebook 04, a real DDP training loop: its claims and results record."""

from __future__ import annotations

from ..results import save_results
from . import closing

STEM = "04_a_real_ddp_training_loop"


def claim_set_epoch(claims, *, changes_with: bool, same_without: bool) -> None:
    """Whether set_epoch reshuffles every epoch, and its absence repeats epoch 0's order."""
    claims.check(
        "with set_epoch every epoch deals the samples in a new order; without it every epoch "
        "repeats epoch 0's", "reshuffles == True and repeats == True",
        reshuffles=changes_with, repeats=same_without,
        otherwise="set_epoch reshuffled: {reshuffles}, the order repeated without it: {repeats}: "
        "this torch's DistributedSampler seeds its shuffle differently")  # fmt: skip


def claim_resume(claims, *, ranks: int, resume_diff: float) -> None:
    """Whether the resumed run ends with the uninterrupted run's parameters."""
    claims.check(
        "the resumed run ends with the uninterrupted run's parameters, bit for bit",
        "resume_max_param_diff == 0", ranks=ranks, resume_max_param_diff=resume_diff,
        otherwise="they differ by {resume_max_param_diff:.1e} with {ranks} ranks (likely, not "
        "measured here: after a restart DDP's first bucket layout adds the ranks' gradients in "
        "another order, see below, and AdamW carries that rounding along)")  # fmt: skip


def claim_eval_equal(claims, *, correct_diff: int, loss_diff: float) -> bool:
    """Whether the all-reduced evaluation is the single-process one; claimed with its figures."""
    return claims.check(
        "the all-reduced evaluation scores the same correct answers as one process on the whole "
        "test set, and the same loss up to rounding", "correct_diff == 0 and loss_diff < 1e-4",
        correct_diff=correct_diff, loss_diff=loss_diff,
        otherwise="they differ by {correct_diff} answer(s) and {loss_diff:.1e} in loss: a sample "
        "scored twice or not at all (padding), or ranks that evaluated different BatchNorm buffers",
    ).held


def _learning(main: dict) -> tuple[float, float, list[float]]:
    """The first and final training loss (3 steps' mean each) and the test accuracies (before
    training, then after each epoch)."""
    train_losses = main["losses"]
    first_loss, final_loss = sum(train_losses[:3]) / 3, sum(train_losses[-3:]) / 3
    return first_loss, final_loss, [e["test_acc"] for e in main["evals"]]


def claim_learning(claims, *, main: dict) -> None:
    """Whether the run learns, and keeps learning after its first epoch."""
    first_loss, final_loss, accs = _learning(main)
    claims.check(
        "the DDP run learns: the training loss fell from {first:.3f} to {final:.3f} and the "
        "held-out accuracy rose from {initial:.3f} to {acc:.3f}", "final < first and acc > initial",
        first=first_loss, final=final_loss, initial=accs[0], acc=accs[-1],
        otherwise="the run did not learn here (loss {first:.3f} -> {final:.3f}, accuracy "
        "{initial:.3f} -> {acc:.3f}): a learning rate wrong for this many ranks, "
        "or a bug")  # fmt: skip
    rising = sum(b > a for a, b in zip(accs[1:-1], accs[2:], strict=True))
    claims.check(
        "it keeps learning after the first epoch: the accuracy rose from {first_epoch:.3f} "
        "after epoch 0 to {acc:.3f} after epoch {last} (the log's numbers), in {rising} of the "
        "{later} later epochs", "gain > 0", first_epoch=accs[1], acc=accs[-1],
        gain=accs[-1] - accs[1], last=len(accs) - 2, rising=rising, later=len(accs) - 2,
        otherwise="the accuracy after epoch 0 ({first_epoch:.3f}) was as high as after epoch "
        "{last} ({acc:.3f}): the task is too easy for this model, or too hard for this many "
        "steps (likely, not measured here)")  # fmt: skip


def save(setup, claims, tasks, *, main: dict, reshuffles: bool, duplicates: int, scalars: dict,
         crashed, saved: dict, final_resumed: dict, resume_diff: float, dist: tuple,
         single: tuple, eval_equal: bool) -> None:  # fmt: skip
    """The results record; ``dist`` and ``single``: (accuracy, loss) all-reduced and in one
    process."""
    first_loss, final_loss, accs = _learning(main)
    (dist_acc, dist_loss), (single_acc, single_loss) = dist, single
    save_results(STEM, {
        "world_size": main["world_size"], "backend": main["backend"], "train_steps": main["steps"],
        "epochs": len(accs) - 1, "first_loss": first_loss, "final_loss": final_loss,
        "initial_test_acc": accs[0], "first_epoch_test_acc": accs[1],  # accs[1]: after epoch 0
        "final_test_acc": accs[-1],
        "sampler_set_epoch_reshuffles": reshuffles, "sampler_padded_duplicates": duplicates,
        "tensorboard_tags": len(scalars), "checkpoint_crashed_exit_code": crashed.returncode,
        "resumed_from_step": saved["step"], "resumed_to_step": final_resumed["step"],
        "resume_max_param_diff": resume_diff,
        "eval_distributed_acc": dist_acc, "eval_single_process_acc": single_acc,
        "eval_loss_diff": abs(single_loss - dist_loss), "eval_equal": eval_equal,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
