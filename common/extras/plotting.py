"""a05 --plot: the training loss per batch, and the toy data with the learned decision boundary.

matplotlib is optional (pip install -e ".[plot]"); nothing else imports this module.
"""

from __future__ import annotations

import os

import torch


def matplotlib_missing() -> str | None:
    """A one-line hint if matplotlib cannot be imported, else None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ('needs matplotlib: pip install matplotlib '
                '(or pip install ".[plot]" in this repository)')
    return None


def plot_training(losses: list[float], model: torch.nn.Module, X: torch.Tensor,
                  y: torch.Tensor, path: str | os.PathLike) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_data) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(range(1, len(losses) + 1), losses, marker="o")
    ax_loss.set(title="Training loss per batch", xlabel="batch", ylabel="cross-entropy loss")

    x_min, x_max = X[:, 0].min().item() - 1, X[:, 0].max().item() + 1
    y_min, y_max = X[:, 1].min().item() - 1, X[:, 1].max().item() + 1
    grid_x, grid_y = torch.meshgrid(torch.linspace(x_min, x_max, 200),
                                    torch.linspace(y_min, y_max, 200), indexing="xy")
    model.eval()
    with torch.no_grad():
        classes = model(torch.stack([grid_x.ravel(), grid_y.ravel()], dim=1)).argmax(dim=1)
    ax_data.contourf(grid_x, grid_y, classes.reshape(grid_x.shape), alpha=0.3, cmap="coolwarm")
    ax_data.scatter(X[:, 0], X[:, 1], c=y, cmap="coolwarm", edgecolors="black")
    ax_data.set(title="Toy data and the learned decision boundary", xlabel="x1", ylabel="x2")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
