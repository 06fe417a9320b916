"""--plot PATH (a05, a07, a08): the loss per batch, and the toy data with the learned decision
boundary. matplotlib is optional: it is imported only for a plot."""

from __future__ import annotations

import argparse
import os

import torch

from common import toy_data
from common.checkpoints import atomic_path, check_writable


def add_plot_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", metavar="PATH", default=None, type=plot_path,
                        help="save a PNG of the loss per batch and the decision boundary "
                             "(needs matplotlib; default: no plot)")


def plot_path(text: str) -> str:
    """argparse type: a PNG path that can be written, once matplotlib is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise argparse.ArgumentTypeError(
            'needs matplotlib: pip install ".[plot]" in the clone\'s environment') from None
    if os.path.splitext(text)[1].lower() not in ("", ".png"):
        raise argparse.ArgumentTypeError(f"{text}: the plot is a PNG; give a path ending in .png")
    if problem := check_writable(text, "--plot"):  # before training, not after it
        raise argparse.ArgumentTypeError(problem)
    return text


def plot_training(losses: list[float], model: torch.nn.Module, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    X, y = toy_data()[:2]
    fig, (ax_loss, ax_data) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(range(1, len(losses) + 1), losses, marker="o")
    ax_loss.set(title="Training loss per batch", xlabel="batch", ylabel="cross-entropy loss")

    grid_x, grid_y = torch.meshgrid(torch.linspace(X[:, 0].min() - 1, X[:, 0].max() + 1, 200),
                                    torch.linspace(X[:, 1].min() - 1, X[:, 1].max() + 1, 200),
                                    indexing="xy")
    grid = torch.stack([grid_x.ravel(), grid_y.ravel()], dim=1)
    model.eval()
    with torch.no_grad():  # on the model's device, which may be a GPU
        classes = model(grid.to(next(model.parameters()).device)).argmax(dim=1).cpu()
    ax_data.contourf(grid_x, grid_y, classes.reshape(grid_x.shape), alpha=0.3, cmap="coolwarm")
    ax_data.scatter(X[:, 0], X[:, 1], c=y, cmap="coolwarm", edgecolors="black")
    ax_data.set(title="Toy data and the learned decision boundary", xlabel="x1", ylabel="x2")
    fig.tight_layout()
    with atomic_path(path, "--plot") as tmp:  # whole or not at all, as a checkpoint
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    print(f"\nSaved the plot to {path}")
