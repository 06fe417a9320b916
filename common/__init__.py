"""The tutorial's shared code: the toy data (section 6), ToyDataset (section 6), NeuralNetwork
(section 5) and compute_accuracy (section 7), written as the text writes them.

Sections 5 to 9 all use these, so each is defined once here and the scripts import it
(``from common import ...``). Python puts a script's own folder on ``sys.path``, so
``python aNN_*.py`` finds this package from any working directory without installing it.
This file imports nothing of ours: it can be pasted into a notebook as it is.

Beside it: ``gpu_howto.py`` and ``gpu_guide.py``, two GPU articles the companion also runs,
not part of the tutorial (a07 --gpu-guides; Exercise A.4, at the end of section 9.2, is in a07),
and the companion's machinery, which you need not read to follow the tutorial: ``flags.py``
(every script's flags), ``runner.py`` (a script's run and its one-line errors), ``devices.py``
(devices, the install check), ``checkpoints.py`` (safe saves, loads, a08's snapshots),
``processes.py`` (a08's processes), ``plots.py`` (--plot) and ``walkthrough.py``.
"""

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["NeuralNetwork", "ToyDataset", "compute_accuracy", "toy_data", "toy_loaders"]


def toy_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Section 6's toy data: (X_train, y_train, X_test, y_test), as a04 writes them out.

    Five labels, one per example, as the book writes them (a04 says what the blog's four do).
    """
    X_train = torch.tensor([
        [-1.2, 3.1],
        [-0.9, 2.9],
        [-0.5, 2.6],
        [2.3, -1.1],
        [2.7, -1.5]
    ])
    y_train = torch.tensor([0, 0, 0, 1, 1])

    X_test = torch.tensor([
        [-0.8, 2.8],
        [2.6, -1.6],
    ])
    y_test = torch.tensor([0, 1])
    return X_train, y_train, X_test, y_test


class ToyDataset(Dataset):
    """Section 6: one (features, label) pair per index."""

    def __init__(self, X, y):
        self.features = X
        self.labels = y

    def __getitem__(self, index):
        one_x = self.features[index]
        one_y = self.labels[index]
        return one_x, one_y

    def __len__(self):
        return self.labels.shape[0]


def toy_loaders() -> tuple[DataLoader, DataLoader]:
    """Section 6's loaders as sections 7 to 9.2 use them: (train_loader, test_loader).

    The training loader shuffles and drops the last incomplete batch; call
    ``torch.manual_seed`` first to get the tutorial's batch order.
    """
    X_train, y_train, X_test, y_test = toy_data()
    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=2,
        shuffle=True,
        num_workers=0,
        drop_last=True,
    )
    test_loader = DataLoader(
        dataset=test_ds,
        batch_size=2,
        shuffle=False,
        num_workers=0,
    )
    return train_loader, test_loader


class NeuralNetwork(torch.nn.Module):
    """Section 5: a multilayer perceptron with two hidden layers (30 and 20 units)."""

    def __init__(self, num_inputs, num_outputs):
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

    def forward(self, x):
        logits = self.layers(x)
        return logits


# NEW: section 9.3's device argument; EXTRA: its default, "cpu", so that section 7's calls
# without it still run
def compute_accuracy(model, dataloader, device="cpu"):
    """Section 7: the fraction of examples classified correctly (the blog's form: the book's
    Listing A.10 has the four lines after ``logits`` outside the ``with`` block)."""

    model = model.eval()
    correct = 0.0
    total_examples = 0

    for idx, (features, labels) in enumerate(dataloader):

        features, labels = features.to(device), labels.to(device)  # NEW: section 9.3's line

        with torch.no_grad():
            logits = model(features)

            predictions = torch.argmax(logits, dim=1)
            compare = labels == predictions
            correct += torch.sum(compare)
            total_examples += len(compare)

    return (correct / total_examples).item()
