"""Section 7 of "PyTorch in One Hour": a typical training loop.

Trains section 5's NeuralNetwork on section 6's toy data, then looks at its predictions.

Run: python a05_training_loop.py [--plot PATH]
"""

import torch
import torch.nn.functional as F

from common import (
    NeuralNetwork,
    compute_accuracy,
    flags,
    plots,
    runner,
    toy_data,
    toy_loaders,
)


def main(plot=None):
    runner.heading("7 A typical training loop")
    # EXTRA: section 6's loaders, from common (a script imports no other script)
    train_loader, test_loader = toy_loaders()
    torch.manual_seed(123)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    num_epochs = 3
    for epoch in range(num_epochs):

        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):

            logits = model(features)

            loss = F.cross_entropy(logits, labels)  # Loss function

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            ### LOGGING
            print(f"Epoch: {epoch+1:03d}/{num_epochs:03d}"
                  f" | Batch {batch_idx:03d}/{len(train_loader):03d}"
                  f" | Train/Val Loss: {loss:.2f}")

        model.eval()
        # Optional model evaluation

    runner.heading("7 Predictions on the training set")
    show_predictions(model)

    runner.heading("7 compute_accuracy")
    print("Training accuracy:", compute_accuracy(model, train_loader))
    print("Test accuracy:", compute_accuracy(model, test_loader))
    plots.plot_boundary(model, plot)  # EXTRA: with --plot PATH, a picture of what it learned


def show_predictions(model):
    # EXTRA: section 6's data, from common (a script imports no other script)
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


if __name__ == "__main__":
    args = flags.a05(__doc__)  # EXTRA: our options (--plot)
    runner.run(main, args.plot)
