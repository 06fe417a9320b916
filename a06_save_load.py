"""Section 8 of "PyTorch in One Hour": saving and loading models.

Trains the model of section 7, saves its state_dict to model.pth in the current folder, loads it
into a fresh model and checks that the restored model predicts exactly what the trained one did.
With --load, skips training and restores a saved file instead.

Run: python a06_save_load.py
     python a06_save_load.py --load model.pth
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from common import (
    NeuralNetwork,
    ToyDataset,
    checkpoints,
    compute_accuracy,
    flags,
    runner,
    toy_data,
    toy_loaders,
)


# EXTRA: section 7's training again, as a05 runs it: the text's section 8 saves the model
# section 7 trained, which a script of its own must train first
def train_as_in_section_7(model: torch.nn.Module, train_loader: DataLoader,
                          optimizer: torch.optim.Optimizer, num_epochs: int) -> None:
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


# EXTRA: the trained model's logits for the training examples, to compare a restored one with
def predict(model: torch.nn.Module) -> torch.Tensor:
    X_train = toy_data()[0]
    model.eval()
    with torch.no_grad():
        return model(X_train)


# EXTRA: section 7's predictions and accuracy, for the model restored from the file
def report(model: torch.nn.Module) -> None:
    X_train, y_train = toy_data()[:2]
    # EXTRA: every training example, in order: the training loader shuffles and drops the
    # last batch, so it would score another 4 of the 5 examples on each run
    train_loader = DataLoader(ToyDataset(X_train, y_train), batch_size=2)
    test_loader = toy_loaders()[1]
    print("Predicted classes:", torch.argmax(predict(model), dim=1))
    print("Training accuracy:", compute_accuracy(model, train_loader))
    print("Test accuracy:", compute_accuracy(model, test_loader))


def main(load=None):
    if load is not None:  # EXTRA: --load PATH restores a saved file without training
        runner.heading("8 Loading a saved model")
        model = NeuralNetwork(2, 2)
        with checkpoints.explain_load_errors(load):  # EXTRA: an unusable file is one line
            # EXTRA: the text's load line below, with --load's PATH for "model.pth"
            print(model.load_state_dict(torch.load(load, weights_only=True)))
        report(model)
        return

    runner.heading("7 (recap) Training the model")
    # EXTRA: section 6's loaders, from common (a script imports no other script)
    train_loader, _ = toy_loaders()
    torch.manual_seed(123)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    train_as_in_section_7(model, train_loader, optimizer, num_epochs=3)
    trained = predict(model)  # EXTRA: the trained model's logits, to compare the restored one with

    runner.heading("8 Saving and loading models")
    checkpoints.require_finite(model.state_dict(), "model.pth")  # EXTRA: never a diverged model
    torch.save(model.state_dict(), "model.pth")

    model = NeuralNetwork(2, 2)
    print(model.load_state_dict(torch.load("model.pth", weights_only=True)))

    # EXTRA: show that the restored model, read from model.pth, is the trained one
    same = torch.equal(trained, predict(model))
    print("The model restored from model.pth gives the trained model's logits exactly:", same)
    report(model)


if __name__ == "__main__":
    args = flags.a06(__doc__)  # EXTRA: our option, --load PATH
    runner.run(main, args.load)
