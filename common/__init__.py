"""What several tutorial scripts share: the toy data, its Dataset, the MLP, and accuracy.

Each piece is defined once here; the scripts import it (``from common import ...``). Python puts
a script's own folder on ``sys.path``, so ``python aNN_*.py`` finds this package from any
working directory without installing it.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["NeuralNetwork", "ToyDataset", "compute_accuracy", "toy_data", "toy_loaders"]


def toy_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Section 6's toy data: (X_train, y_train, X_test, y_test).

    The blog's text prints y_train with four labels; that is a typo. The book and the author's
    code use five, one per training example, as here.
    """
    X_train = torch.tensor(
        [[-1.2, 3.1], [-0.9, 2.9], [-0.5, 2.6], [2.3, -1.1], [2.7, -1.5]]
    )
    y_train = torch.tensor([0, 0, 0, 1, 1])
    X_test = torch.tensor([[-0.8, 2.8], [2.6, -1.6]])
    y_test = torch.tensor([0, 1])
    return X_train, y_train, X_test, y_test


class ToyDataset(Dataset):
    """Section 6: one (features, label) pair per index."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor) -> None:
        self.features = X
        self.labels = y

    def __getitem__(self, index: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if (isinstance(index, torch.Tensor) and index.dim() == 1
                and index.dtype in (torch.int32, torch.int64)):
            # EXTRA: a whole batch of indices (from common.distributed.DistributedBatchSampler).
            # index_select takes the same rows as features[index], ~3x faster on CPU
            # (measured: 2.1 vs 6.6 ms for a batch of 65536 from 4M examples)
            return self.features.index_select(0, index), self.labels.index_select(0, index)
        return self.features[index], self.labels[index]

    def __len__(self) -> int:
        return self.labels.shape[0]


def toy_loaders(batch_size: int = 2) -> tuple[DataLoader, DataLoader]:
    """Section 6's loaders as sections 7 to 9.2 use them: (train_loader, test_loader).

    The training loader shuffles and drops the last incomplete batch; call
    ``torch.manual_seed`` first to get the tutorial's batch order.
    """
    X_train, y_train, X_test, y_test = toy_data()
    train_loader = DataLoader(
        ToyDataset(X_train, y_train),
        batch_size=batch_size,
        shuffle=True,
        num_workers=0,
        drop_last=True,
    )
    test_loader = DataLoader(
        ToyDataset(X_test, y_test), batch_size=batch_size, shuffle=False, num_workers=0
    )
    return train_loader, test_loader


class NeuralNetwork(torch.nn.Module):
    """Section 5: a multilayer perceptron with two hidden layers (30 and 20 units)."""

    def __init__(self, num_inputs: int, num_outputs: int) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            # 1st hidden layer
            torch.nn.Linear(num_inputs, 30),
            torch.nn.ReLU(),
            # 2nd hidden layer
            torch.nn.Linear(30, 20),
            torch.nn.ReLU(),
            # output layer
            torch.nn.Linear(20, num_outputs),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.layers(x)
        return logits


def compute_accuracy(
    model: torch.nn.Module, dataloader: DataLoader, device: torch.device | str | None = None
) -> float:
    """Section 7: the fraction of examples in ``dataloader`` that ``model`` classifies correctly.

    ``device``: section 9 moves each batch there (default: stay where the data is).
    EXTRA: an empty loader is a clear error instead of the tutorial's division by zero.
    """
    correct, total = count_correct(model, dataloader, device)
    if total == 0:
        raise ValueError("compute_accuracy: the dataloader yielded no examples")
    return correct / total


def count_correct(
    model: torch.nn.Module, dataloader: DataLoader, device: torch.device | str | None = None
) -> tuple[int, int]:
    """(correct predictions, examples seen): the two counts behind an accuracy.

    Kept apart so that section 9.3 can add the counts of all processes before dividing.
    """
    model.eval()
    correct = 0
    total = 0
    with torch.no_grad():
        for features, labels in dataloader:
            if device is not None:
                features, labels = features.to(device), labels.to(device)
            predictions = torch.argmax(model(features), dim=1)
            correct += int(torch.sum(predictions == labels))
            total += len(labels)
    return correct, total
