"""The error a user can fix, which ``cli.run`` turns into one line instead of a traceback."""


class UserError(Exception):
    """A problem the user can fix: ``run`` prints ``error: <message>`` and exits with 1. Only
    the first process says it, as every process meets most such errors alike; one that a
    process finds on its own (its launch variables) sets ``every_process``."""

    every_process = False


def require_finite_loss(loss: float, kept: str = "nothing was saved; try a smaller --lr") -> None:
    """A training run whose loss became NaN or infinite has diverged: stop it before it saves
    weights that are no good to anyone. ``kept``: what is on disk, and what to do."""
    if loss != loss or loss in (float("inf"), float("-inf")):
        raise UserError(f"the training loss became {loss}: the weights diverged (--lr too "
                        f"large?), and {kept}")
