"""Section 8 of "PyTorch in One Hour": saving and loading models.

Trains the model of section 7, saves its state_dict, loads it into a fresh model and checks that
the restored model predicts exactly what the trained one did. With --load, skips training and
restores a saved file instead.

Run: python a06_save_load.py [--path model.pth]
     python a06_save_load.py --load model.pth
"""

import argparse
import sys

import torch

from a05_training_loop import train_tutorial_model
from common import NeuralNetwork, compute_accuracy, toy_data, toy_loaders
from common.checkpoint import CheckpointError, atomic_save, load_state_dict_into
from common.cli import add_training_flags, heading, make_parser, run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    add_training_flags(parser)
    parser.add_argument("--path", default="model.pth",
                        help="where to save the trained model's state_dict "
                             "(default: %(default)s, in the current directory)")
    parser.add_argument("--load", metavar="PATH", default=None,
                        help="restore this checkpoint instead of training "
                             "(default: train, then save to --path)")
    return parser.parse_args(argv)


def predict(model: torch.nn.Module) -> torch.Tensor:
    X_train = toy_data()[0]
    model.eval()
    with torch.no_grad():
        return model(X_train)


def report(model: torch.nn.Module) -> None:
    train_loader, test_loader = toy_loaders()
    print("Predicted classes:", torch.argmax(predict(model), dim=1))
    print("Training accuracy:", compute_accuracy(model, train_loader))
    print("Test accuracy:", compute_accuracy(model, test_loader))


def save_then_restore(args: argparse.Namespace) -> None:
    heading("7 (recap) Training the model")
    model = train_tutorial_model(args)[0]

    heading("8 Saving and loading models")
    # EXTRA: written atomically, so an interrupted save never leaves a half-written file
    atomic_save(model.state_dict(), args.path)
    print(f"Saved model.state_dict() to {args.path}")

    restored = NeuralNetwork(2, 2)  # same architecture as the saved model
    # weights_only=True: load tensors only, never code (the default since torch 2.6)
    print(load_state_dict_into(restored, args.path))

    # EXTRA: show that the restored model is the trained one
    same = torch.equal(predict(model), predict(restored))
    print("Restored model gives the trained model's logits exactly:", same)
    report(restored)


def restore_only(path: str) -> None:
    heading("8 Loading a saved model")
    model = NeuralNetwork(2, 2)
    print(load_state_dict_into(model, path))
    report(model)


def main() -> None:
    args = parse_args()
    try:
        if args.load is not None:
            restore_only(args.load)
        else:
            save_then_restore(args)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except OSError as err:  # e.g. --path in a folder that does not exist or is read-only
        print(f"error: cannot write {args.path}: {err.strerror}; choose another --path",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run(main)
