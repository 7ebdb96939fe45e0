"""Rank 0's log of a training run: train_step2 brings it in (notebook 04 section 2 shows it).

Rank 0 alone prints the progress (step 1 does it inline) and writes the TensorBoard scalars,
for every rank; steps 2 to 6 make these calls, so that each file shows what it adds. It also
keeps what metrics.json records: rank 0's losses and every evaluation.
"""

import os

from torch.utils.tensorboard import SummaryWriter


class Rank0Log:
    """On rank 0: progress lines and TensorBoard scalars in out/tb; on the other ranks: nothing."""

    def __init__(self, out, rank, total_steps, samples_per_step, start_step=None):
        self.rank, self.total_steps, self.samples_per_step = rank, total_steps, samples_per_step
        self.losses, self.evals = [], []  # rank 0's losses; every evaluation, on every rank
        self.writer = None
        if rank == 0:  # one writer; purge_step: a resumed run drops the events after its step
            self.writer = SummaryWriter(os.path.join(out, "tb"), purge_step=start_step)
        if start_step:
            self.print(f"resumed from a checkpoint at step {start_step}")

    def print(self, text):
        if self.rank == 0:
            print(text, flush=True)

    def step(self, step, loss, lr, step_seconds):
        """After optimizer step `step`: a progress line about 20 times a run; the scalars."""
        if self.rank != 0:
            return
        self.losses.append(loss.item())
        if step % max(1, self.total_steps // 20) == 0 or step == self.total_steps:
            print(f"step {step}/{self.total_steps}  loss {loss.item():.4f}", flush=True)
        self.writer.add_scalar("train/loss", loss.item(), step)
        self.writer.add_scalar("train/lr", lr, step)
        self.writer.add_scalar("train/samples_per_s", self.samples_per_step / step_seconds, step)

    def evaluated(self, step, test_acc, test_loss):
        """An evaluation of the model after `step` optimizer steps."""
        self.evals.append({"step": step, "test_acc": test_acc, "test_loss": test_loss})

    def epoch_end(self, epoch, step, loss, test_acc, test_loss):
        """The evaluation at an epoch's end: kept, and on rank 0 printed and plotted."""
        self.evaluated(step, test_acc, test_loss)
        if self.rank == 0:
            self.writer.add_scalar("test/accuracy", test_acc, step)
            self.writer.add_scalar("test/loss", test_loss, step)
            print(f"epoch {epoch}  step {step}  loss {loss.item():.4f}  "
                  f"test accuracy {test_acc:.3f}  test loss {test_loss:.4f}", flush=True)

    def close(self):
        if self.writer is not None:
            self.writer.close()
