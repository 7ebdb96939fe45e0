"""Reference answers for notebook 08 (used only when COURSE_SOLUTIONS is set)."""


def stuck(log_every, bad_step, steps=8, checkpoint_every=3):
    """Where rank 0 and the last rank wait in pitfall_logging.py (2 or more ranks, gloo).

    Each step every rank makes a forward (DDP broadcasts BatchNorm's buffers) and a backward
    (an all-reduce); after the backward of step s, rank 0 alone all-reduces in log_metrics
    when (s + 1) % log_every == 0, and every rank meets the checkpoint barrier when
    (s + 1) % checkpoint_every == 0. At bad_step the last rank's loss is NaN: after that
    forward it leaves the loop for the final gather_object. The first place where the two
    lists of collectives differ is where both wait.
    """
    for step in range(steps):
        if step == bad_step:  # rank 0 goes on to this step's backward
            return ("backward", "gather_object")
        if (step + 1) % log_every == 0:  # rank 0 logs; the others go on
            if (step + 1) % checkpoint_every == 0:
                return ("log_metrics", "barrier")
            return ("log_metrics", "forward" if step + 1 < steps else "gather_object")
    return ("finished", "finished")
