"""a05, a07 and a08 --plot: the loss per batch, and the toy data with the learned decision
boundary. matplotlib is optional, imported only for a plot."""

from __future__ import annotations

import argparse
import os

from common import toy_data
from common.extras.checkpoint import atomic_path, check_writable
from common.extras.reporting import unwrap

import torch


def add_plot_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", metavar="PATH", default=None, type=_plot_path,
                        help="save a PNG of the loss per batch and the decision boundary "
                             "(needs matplotlib; default: no plot)")


def _plot_path(text: str) -> str:
    """argparse type: any path, once matplotlib is known to be importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise argparse.ArgumentTypeError(
            'needs matplotlib: pip install ".[plot]" in this repository\'s environment, or '
            'python -m pip install matplotlib with the Python that runs this script') from None
    if os.path.splitext(text)[1].lower() not in ("", ".png"):
        raise argparse.ArgumentTypeError(f"{text}: the plot is a PNG; give a path ending "
                                         f"in .png")
    if problem := check_writable(text, "--plot"):  # before training, not after it
        raise argparse.ArgumentTypeError(problem)
    return text


def plot_training(losses: list[float], model: torch.nn.Module,
                  path: str | os.PathLike) -> None:
    """Save the plot to ``path``; under DDP rank 0's (its losses; the model is the same)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    X, y = toy_data()[:2]
    model = unwrap(model)  # under DDP: the model itself, no collectives

    fig, (ax_loss, ax_data) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(range(1, len(losses) + 1), losses, marker="o")
    ax_loss.set(title="Training loss per batch", xlabel="batch", ylabel="cross-entropy loss")

    x_min, x_max = X[:, 0].min().item() - 1, X[:, 0].max().item() + 1
    y_min, y_max = X[:, 1].min().item() - 1, X[:, 1].max().item() + 1
    grid_x, grid_y = torch.meshgrid(torch.linspace(x_min, x_max, 200),
                                    torch.linspace(y_min, y_max, 200), indexing="xy")
    grid = torch.stack([grid_x.ravel(), grid_y.ravel()], dim=1)
    model.eval()
    with torch.no_grad():  # on the model's device, which may be a GPU
        classes = model(grid.to(next(model.parameters()).device)).argmax(dim=1).cpu()
    ax_data.contourf(grid_x, grid_y, classes.reshape(grid_x.shape), alpha=0.3, cmap="coolwarm")
    ax_data.scatter(X[:, 0], X[:, 1], c=y, cmap="coolwarm", edgecolors="black")
    ax_data.set(title="Toy data and the learned decision boundary", xlabel="x1", ylabel="x2")
    fig.tight_layout()
    with atomic_path(path, "--plot") as tmp:  # whole or not at all, as a checkpoint
        fig.savefig(tmp, dpi=100, format="png")  # the name's own suffix is not looked at
    plt.close(fig)
    print(f"\nSaved the plot to {path}")
