"""Sections 9.1 and 9.2 of "PyTorch in One Hour": computations on GPU devices, single-GPU
training (+ Exercise A.4 with --benchmark).

Section 7's training loop with the three changes of section 9.2, each marked NEW: a device
variable, the model moved to it, every batch moved to it. Runs on CUDA, Apple's MPS, or the CPU.
EXTRA marks what this companion adds beyond the tutorial.

Run: python a07_gpu_single.py [--device auto|cpu|cuda|mps] [--benchmark]
"""

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from common import NeuralNetwork, compute_accuracy, toy_data, toy_loaders
from common.extras import (
    add_benchmark_flags,
    add_device_flag,
    add_training_flags,
    check_batch_fits,
    detect_accelerator,
    device_from_flag,
    exercise_a4,
    heading,
    make_parser,
    run,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    add_training_flags(parser)
    add_device_flag(parser)  # EXTRA: --device auto|cpu|cuda|mps
    add_benchmark_flags(parser)  # EXTRA: --benchmark, --sizes (Exercise A.4)
    args = parser.parse_args(argv)
    check_batch_fits(parser, args.batch_size, len(toy_data()[1]))  # EXTRA: a clear error
    args.device = device_from_flag(parser, args.device)  # EXTRA: None for auto; missing: one line
    return args


def section_9_1_tensors_on_device(device: torch.device | None) -> None:
    device = device or torch.device(detect_accelerator() or "cpu")  # EXTRA: any accelerator
    tensor_1 = torch.tensor([1.0, 2.0, 3.0])
    tensor_2 = torch.tensor([4.0, 5.0, 6.0])
    print("On the CPU:", tensor_1 + tensor_2)
    if device.type == "cpu":
        found = detect_accelerator()
        print(f"Training device: cpu ({'--device cpu' if found else 'no accelerator found'}).")
        print("On a GPU the same addition prints tensor([5., 7., 9.], device='cuda:0'), and\n"
              "adding a CPU tensor to a GPU tensor raises RuntimeError: Expected all tensors\n"
              "to be on the same device. Every tensor in one operation must live on one device.")
        return
    print(f"Training device: {device}")
    tensor_1 = tensor_1.to(device)
    tensor_2 = tensor_2.to(device)
    print(f"On {device.type}:", tensor_1 + tensor_2)
    try:
        tensor_1 + tensor_2.to("cpu")
    except RuntimeError as err:
        print("Adding a CPU tensor to it fails:", str(err).splitlines()[0])


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int,
          device: torch.device) -> None:  # NEW: the device to train on
    for epoch in range(num_epochs):
        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):
            features, labels = features.to(device), labels.to(device)  # NEW: batch to device
            logits = model(features)
            loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()
            optimizer.step()

            # LOGGING
            print(f"Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                  f" | Batch {batch_idx:03d}/{len(train_loader):03d}"
                  f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        # Optional model evaluation would go here


def train_tutorial_model(args: argparse.Namespace
                         ) -> tuple[torch.nn.Module, DataLoader, DataLoader, torch.device]:
    """Section 7's setup and loop: returns (model, train_loader, test_loader, device)."""
    train_loader, test_loader = toy_loaders(args.batch_size)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # NEW: the device
    if device.type == "cpu":  # NEW: the text's variant for Apple-silicon Macs
        device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    device = args.device or device  # EXTRA: --device, where given, overrides the choice above
    model = model.to(device)  # NEW: the parameters move to the device
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    train(model, train_loader, optimizer, args.epochs, device)
    return model, train_loader, test_loader, device


def main() -> None:
    args = parse_args()
    heading("9.1 Computations on GPU devices")
    section_9_1_tensors_on_device(args.device)
    if args.benchmark:
        heading("9.1 Exercise A.4: when does the accelerator win?")
        exercise_a4(args.sizes)

    heading("9.2 Single-GPU training")
    model, train_loader, test_loader, device = train_tutorial_model(args)

    heading("9.2 compute_accuracy")
    print("Training accuracy:", compute_accuracy(model, train_loader, device=device))
    print("Test accuracy:", compute_accuracy(model, test_loader, device=device))


if __name__ == "__main__":
    run(main)
