"""a05 --plot PATH (the flag is in ``flags``): the loss per batch, and the toy data
with the learned decision boundary. matplotlib is optional: it is imported only for a plot."""

from __future__ import annotations

import torch

from common import toy_data
from common.checkpoints import atomic_path


def plot_training(losses: list[float], model: torch.nn.Module, path: str | None) -> None:
    if path is None:
        return
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
