"""Notebook 04, a real DDP training loop: its claims and results record."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..results import save_results
from . import closing

STEM = "04_a_real_ddp_training_loop"


def plot_glyphs(data: dict) -> None:
    """Every class's glyph without noise and as trained, look-alike pairs in one column; then
    the model's size at the default width. ``data``: make_dataset's options (DATA)."""
    from common.glyphs import Net, make_dataset  # launchers/common/, importable after configure

    clean, _ = make_dataset(400, seed=1, **{**data, "noise": 0.0})
    noisy, labels = make_dataset(400, seed=1, **data)  # the same places, with noise
    fig, axes = plt.subplots(4, 8, figsize=(9, 4.6))
    for c in range(data["classes"]):  # each column: a look-alike pair (classes 2k, 2k+1)
        i = (labels == c).nonzero()[0, 0]
        for row, images in ((c % 2, clean), (2 + c % 2, noisy)):
            ax = axes[row, c // 2]
            ax.imshow(images[i, 0], cmap="gray")
            ax.set_title(f"class {c}", fontsize=7)
            ax.axis("off")
    fig.suptitle("each column a look-alike pair: the glyphs without noise (top), as trained "
                 "(bottom)", fontsize=9)
    plt.show()
    print(f"{sum(p.numel() for p in Net(data['classes']).parameters())} parameters at the "
          "default width")


def plot_scalars(scalars: dict) -> None:
    """The TensorBoard scalars read back ({tag: (steps, values)}), one panel per tag."""
    fig, axes = plt.subplots(1, 4, figsize=(12, 2.6), layout="tight")
    units = {"train/loss": "cross-entropy", "test/accuracy": "fraction correct",
             "train/lr": "learning rate", "train/samples_per_s": "samples / s"}
    for ax, (tag, unit) in zip(axes, units.items(), strict=True):
        ax.plot(*scalars[tag], marker="o" if tag.startswith("test") else None, markersize=3)
        ax.set(title=tag, xlabel="optimizer step", ylabel=unit)
    fig.suptitle(f"read back from TensorBoard event files ({', '.join(sorted(scalars))})",
                 fontsize=9)
    plt.show()


def start_tensorboard(logdir):
    """A TensorBoard server for logdir on a free local port, a child of this kernel: on Linux it
    gets SIGTERM when the kernel dies (PR_SET_PDEATHSIG), on every platform at a normal exit."""
    import atexit
    import ctypes
    import signal
    import socket
    import subprocess
    import sys

    def die_with_kernel():  # Linux: the server gets SIGTERM when this kernel dies
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG

    with socket.socket() as s:  # a free port on this machine
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=die_with_kernel if sys.platform == "linux" else None)  # fmt: skip
    atexit.register(server.terminate)  # a normal shutdown, on every platform
    print(f"TensorBoard (pid {server.pid}) serves {logdir} at http://127.0.0.1:{port}/")
    return server


def plot_resume(losses: dict, *, resumed_from: int, crashed_at: int) -> None:
    """The training loss of each run ({label: (steps, values)}, the uninterrupted one first),
    a line at the step the crashed run died and one at the step the resumed run started from."""
    fig, ax = plt.subplots(figsize=(8, 3))
    for (label, curve), style in zip(losses.items(), ["-", ":", "--"], strict=True):
        ax.plot(*curve, style, label=label, linewidth=2 if style == "-" else 1.5)
    ax.axvline(crashed_at, color="tab:red", linewidth=1.2, label=f"crash (step {crashed_at})")
    ax.axvline(resumed_from, color="gray", linewidth=0.8,
               label=f"last checkpoint (step {resumed_from})")
    ax.set(xlabel="optimizer step", ylabel="training loss (rank 0, cross-entropy)",
           title=f"crash at step {crashed_at}, resume from the checkpoint of step {resumed_from}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # outside: covers no curve
    plt.show()


def plot_learning(main: dict, classes: int) -> None:
    """The training loss of every step and the all-reduced test loss and accuracy after every
    epoch (``main``: step 4's metrics)."""
    evals = main["evals"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 2.8))
    ax1.plot(range(1, len(main["losses"]) + 1), main["losses"], linewidth=0.8,
             label="training (rank 0)")
    ax1.plot([e["step"] for e in evals], [e["test_loss"] for e in evals], "o-", label="test")
    ax1.set(title="loss", xlabel="optimizer step", ylabel="cross-entropy")
    ax2.plot([e["step"] for e in evals], [e["test_acc"] for e in evals], "o-",
             label="test, all-reduced")
    ax2.axhline(1 / classes, color="gray", linestyle=":", label="chance")
    ax2.set(title="held-out accuracy", xlabel="optimizer step", ylabel="fraction correct",
            ylim=(0, 1))
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    plt.show()


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


def claim_same_log(claims, *, step2: dict, step4: dict) -> bool:
    """Whether step 4's log repeats step 2's: the same training losses, and at every evaluation
    the same accuracy and the loss below the log's last printed digit (it prints 4 decimals)."""
    losses_differing = sum(a != b for a, b in zip(step2["losses"], step4["losses"], strict=True))
    pairs = list(zip(step2["evals"], step4["evals"], strict=True))
    return claims.check(
        "step 4's log repeats step 2's number for number: the training loss of all {steps} "
        "steps bit for bit, and at each of the {evals} evaluations the same test accuracy and a "
        "test loss at most {loss_diff:.1e} apart, below the log's 4 decimals: sharing the "
        "evaluation changed no result", "losses_differing == 0 and acc_differing == 0 and "
        "loss_diff < 5e-5", steps=len(step2["losses"]), evals=len(pairs),
        losses_differing=losses_differing,
        acc_differing=sum(a["test_acc"] != b["test_acc"] for a, b in pairs),
        loss_diff=max(abs(a["test_loss"] - b["test_loss"]) for a, b in pairs),
        otherwise="step 4's log differs from step 2's: {losses_differing} of its training losses "
        "and {acc_differing} of its test accuracies, its test losses by up to {loss_diff:.1e}: "
        "the training "
        "changed, or the shared evaluation scores other samples or other BatchNorm buffers "
        "(not measured here)").held  # fmt: skip


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
         single: tuple, eval_equal: bool, same_log: bool) -> None:  # fmt: skip
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
        "step4_log_equals_step2": same_log,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
