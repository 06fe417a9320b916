"""a05 --plot PATH (the flag is in ``flags``): the toy data with the decision boundary the
trained model learned. matplotlib is optional: it is imported only for a plot."""

from __future__ import annotations

import torch

from common import toy_data
from common.checkpoints import atomic_path


def plot_boundary(model: torch.nn.Module, path: str | None) -> None:
    if path is None:
        return
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    X, y = toy_data()[:2]
    grid_x, grid_y = torch.meshgrid(torch.linspace(X[:, 0].min() - 1, X[:, 0].max() + 1, 200),
                                    torch.linspace(X[:, 1].min() - 1, X[:, 1].max() + 1, 200),
                                    indexing="xy")
    model.eval()
    with torch.no_grad():
        classes = model(torch.stack([grid_x.ravel(), grid_y.ravel()], dim=1)).argmax(dim=1)
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.contourf(grid_x, grid_y, classes.reshape(grid_x.shape), alpha=0.3, cmap="coolwarm")
    ax.scatter(X[:, 0], X[:, 1], c=y, cmap="coolwarm", edgecolors="black")
    ax.set(title="The learned decision boundary", xlabel="x1", ylabel="x2")
    fig.tight_layout()
    with atomic_path(path, "--plot") as tmp:  # whole or not at all, as a checkpoint
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    print(f"\nSaved the plot to {path}")
