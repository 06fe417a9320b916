"""Section 8 of "PyTorch in One Hour": saving and loading models.

Trains the model of section 7, saves its state_dict, loads it into a fresh model and checks that
the restored model predicts exactly what the trained one did. With --load, skips training and
restores a saved file instead.

Run: python a06_save_load.py [--path model.pth]
     python a06_save_load.py --load model.pth
"""

import argparse

from common import NeuralNetwork, ToyDataset, compute_accuracy, extras, toy_data, toy_loaders

import torch
from torch.utils.data import DataLoader

from a05_training_loop import train_tutorial_model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = extras.make_parser(__doc__)
    extras.add_training_flags(parser)
    parser.add_argument("--path", default="model.pth",
                        help="where to save the trained model's state_dict "
                             "(default: %(default)s, in the current directory)")
    parser.add_argument("--load", metavar="PATH", default=None,
                        help="restore this checkpoint instead of training "
                             "(default: train, then save to --path)")
    args = parser.parse_args(argv)
    extras.check_batch_fits(parser, args.batch_size, len(toy_data()[1]))  # EXTRA: a clear error
    if args.load is None and (problem := extras.check_writable(args.path, "--path")):
        parser.error(f"argument --path: {problem}")  # EXTRA: before training, not after it
    return args


def predict(model: torch.nn.Module) -> torch.Tensor:
    X_train = toy_data()[0]
    model.eval()
    with torch.no_grad():
        return model(X_train)


def report(model: torch.nn.Module) -> None:
    X_train, y_train = toy_data()[:2]
    # EXTRA: every training example, in order: the training loader shuffles and drops the
    # last batch, so it would score another 4 of the 5 examples on each run
    train_loader = DataLoader(ToyDataset(X_train, y_train), batch_size=2)
    test_loader = toy_loaders()[1]
    print("Predicted classes:", torch.argmax(predict(model), dim=1))
    print("Training accuracy:", compute_accuracy(model, train_loader))
    print("Test accuracy:", compute_accuracy(model, test_loader))


def save(model: torch.nn.Module, path: str) -> None:
    # EXTRA: torch.save writes a temporary file, renamed to `path` once complete, so an
    # interrupted save never leaves a half-written file (and a bad --path is one line)
    with extras.atomic_path(path) as tmp_path:
        torch.save(model.state_dict(), tmp_path)
    print(f"Saved model.state_dict() to {path}")


def load(path: str) -> torch.nn.Module:
    model = NeuralNetwork(2, 2)  # needs to match the saved model's architecture exactly
    # EXTRA: an unusable file (missing, damaged, another architecture) is one line
    with extras.explain_checkpoint_errors(path):
        # weights_only=True: load tensors only, never code (the default since torch 2.6)
        print(model.load_state_dict(torch.load(path, weights_only=True)))
    return model


def save_then_restore(args: argparse.Namespace) -> None:
    extras.heading("7 (recap) Training the model")
    model = train_tutorial_model(args).model

    extras.heading("8 Saving and loading models")
    save(model, args.path)
    restored = load(args.path)

    # EXTRA: show that the restored model is the trained one
    same = torch.equal(predict(model), predict(restored))
    print("Restored model gives the trained model's logits exactly:", same)
    report(restored)


def main() -> None:
    args = parse_args()
    if args.load is not None:  # EXTRA: restore a saved file without training
        extras.heading("8 Loading a saved model")
        report(load(args.load))
    else:
        save_then_restore(args)


if __name__ == "__main__":
    extras.run(main)
