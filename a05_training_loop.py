"""Section 7 of "PyTorch in One Hour": a typical training loop.

Trains section 5's NeuralNetwork on section 6's toy data, then looks at its predictions.

Run: python a05_training_loop.py [--plot PATH]
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from common import NeuralNetwork, compute_accuracy, flags, plots, runner, toy_data, toy_loaders


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int) -> list[float]:
    losses = []  # EXTRA: kept for --plot
    for epoch in range(num_epochs):
        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):
            logits = model(features)
            loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()
            optimizer.step()
            losses.append(runner.require_finite_loss(loss.item()))  # EXTRA: diverged: stop

            # LOGGING (the blog counts batches from 000; the author's notebooks now from 001)
            print(f"Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                  f" | Batch {batch_idx:03d}/{len(train_loader):03d}"
                  f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        # Optional model evaluation would go here
    return losses


def show_predictions(model: torch.nn.Module) -> None:
    X_train, y_train, _, _ = toy_data()
    model.eval()
    with torch.no_grad():
        outputs = model(X_train)
    print("Logits:\n", outputs, sep="")
    torch.set_printoptions(sci_mode=False)  # 0.0009 rather than 9.0e-04
    probas = torch.softmax(outputs, dim=1)
    print("Class-membership probabilities (softmax):\n", probas, sep="")
    predictions = torch.argmax(probas, dim=1)
    print("argmax of the probabilities:", predictions)
    predictions = torch.argmax(outputs, dim=1)
    print("argmax of the logits:", predictions)
    print("predictions == y_train:", predictions == y_train)
    print("torch.sum(predictions == y_train):", torch.sum(predictions == y_train))


def main(argv: list[str] | None = None) -> None:
    args = flags.a05(__doc__, argv)  # EXTRA: the text's knobs (and --plot), checked
    runner.heading("7 A typical training loop")
    train_loader, test_loader = toy_loaders(args.batch_size)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses = train(model, train_loader, optimizer, args.epochs)

    runner.heading("7 Predictions on the training set")
    show_predictions(model)

    runner.heading("7 compute_accuracy")
    print("Training accuracy:", compute_accuracy(model, train_loader))
    print("Test accuracy:", compute_accuracy(model, test_loader))

    if args.plot is not None:  # EXTRA: --plot
        plots.plot_training(losses, model, args.plot)


if __name__ == "__main__":
    runner.run(main)
