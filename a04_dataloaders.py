"""Section 6 of "PyTorch in One Hour": setting up efficient data loaders.

ToyDataset lives in common/__init__.py, and a copy of the toy data beside it, because sections 7
to 9 use them too.

Run: python a04_dataloaders.py
"""

import torch
from torch.utils.data import DataLoader

from common import ToyDataset, flags, runner


def section_6() -> ToyDataset:
    runner.heading("6 Setting up efficient data loaders: the toy data")
    X_train = torch.tensor([
        [-1.2, 3.1],
        [-0.9, 2.9],
        [-0.5, 2.6],
        [2.3, -1.1],
        [2.7, -1.5]
    ])
    # FIXED: five labels, one per example (the book's): the blog's four, [0, 0, 0, 1], give
    # len(train_ds) 4, never load the fifth example, and break section 7's predictions == y_train
    y_train = torch.tensor([0, 0, 0, 1, 1])

    X_test = torch.tensor([
        [-0.8, 2.8],
        [2.6, -1.6],
    ])
    y_test = torch.tensor([0, 1])
    print("X_train:\n", X_train, sep="")  # EXTRA: printed, which the text only builds
    print("y_train:", y_train)  # EXTRA: likewise

    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)
    print("len(train_ds):", len(train_ds))

    runner.heading("6 DataLoader: shuffled batches of 2")
    torch.manual_seed(123)  # fixes the shuffling order

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=2,
        shuffle=True,
        num_workers=0
    )

    test_ds = ToyDataset(X_test, y_test)  # the blog repeats it here (the book's A.7 does not)

    test_loader = DataLoader(
        dataset=test_ds,
        batch_size=2,
        shuffle=False,
        num_workers=0
    )

    for idx, (x, y) in enumerate(train_loader):
        print(f"Batch {idx+1}:", x, y)

    runner.heading("6 DataLoader with drop_last=True: no short last batch")
    # Not seeded again: the generator continues, so the order differs from the pass above.
    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=2,
        shuffle=True,
        num_workers=0,
        drop_last=True
    )

    for idx, (x, y) in enumerate(train_loader):
        print(f"Batch {idx+1}:", x, y)

    runner.heading("6 The test loader: no shuffling")
    # EXTRA: the test loader's one batch, which the text builds but does not print
    for idx, (x, y) in enumerate(test_loader):
        print(f"Batch {idx+1}:", x, y)
    return train_ds  # EXTRA: for section_6_num_workers, below


def section_6_num_workers(train_ds: ToyDataset) -> None:
    runner.heading("6 num_workers: loading in background processes")
    # EXTRA: the text's words on num_workers, printed, and what they mean on macOS, Windows,
    # Python 3.14 and in notebooks
    print("num_workers=0 loads every batch in the main process, between training steps.\n"
          "num_workers>0 starts that many worker processes that prepare the next batches\n"
          "while the model trains. That pays off for large data sets read from disk; for a\n"
          "tiny in-memory data set like this one, starting the workers costs more than it saves.\n"
          "On macOS, Windows and Linux from Python 3.14 (spawn, forkserver) each worker starts\n"
          "as a fresh Python that imports this script: that is why it runs only under\n"
          "`if __name__ == \"__main__\":`, and why a Dataset\n"
          "defined in a notebook cell fails there (define it in a .py file and import it).")
    # EXTRA: show that workers produce the same data (the tutorial only describes them)
    loader = DataLoader(train_ds, batch_size=2, shuffle=False, num_workers=2)
    print("The training set through 2 workers, not shuffled:")
    for idx, (x, y) in enumerate(loader):
        print(f"Batch {idx+1}:", x, y)


def main() -> None:
    train_ds = section_6()
    section_6_num_workers(train_ds)


if __name__ == "__main__":
    flags.Parser(__doc__).parse_args()  # EXTRA: --help
    runner.run(main)
