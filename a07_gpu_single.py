"""Sections 9.1 and 9.2 of "PyTorch in One Hour": GPU computations, single-GPU training.

Section 7's loop with 9.2's three changes (NEW): a device, the model and each batch moved to it.

Run: python a07_gpu_single.py [--device auto|cpu|cuda|mps] [--benchmark] [--gpu-guides]
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from common import (
    NeuralNetwork,
    compute_accuracy,
    devices,
    flags,
    gpu_articles,
    plots,
    runner,
    toy_loaders,
)


def section_9_1_tensors_on_device(device: torch.device | None) -> None:
    tensor_1 = torch.tensor([1.0, 2.0, 3.0])
    tensor_2 = torch.tensor([4.0, 5.0, 6.0])
    print("On the CPU:", tensor_1 + tensor_2)
    device = devices.show_device(device)  # EXTRA: the accelerator, named; or why none
    if device.type != "cpu":
        tensor_1, tensor_2 = tensor_1.to(device), tensor_2.to(device)
        print(f"On {device.type}:", tensor_1 + tensor_2)
        try:
            print(tensor_1 + tensor_2.to("cpu"))
        except RuntimeError as err:  # EXTRA: shown, not raised
            print("Adding a CPU tensor to it fails:", str(err).splitlines()[0])


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int,
          device: torch.device,  # NEW: the device to train on
          amp: str | None) -> list[float]:  # EXTRA: --amp
    losses = []  # EXTRA: kept for --plot
    for epoch in range(num_epochs):
        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):
            features, labels = features.to(device), labels.to(device)  # NEW: batch to device
            with devices.autocast(device, amp):  # EXTRA: --amp, mixed precision
                logits = model(features)
                loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()
            optimizer.step()
            losses.append(runner.require_finite_loss(loss.item()))  # EXTRA: diverged: stop

            # LOGGING
            print(f"Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                  f" | Batch {batch_idx:03d}/{len(train_loader):03d}"
                  f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        # Optional model evaluation would go here
    return losses


def main(argv: list[str] | None = None) -> None:
    args = flags.a07(__doc__, argv)  # EXTRA: the text's knobs and ours, checked
    runner.heading("9.1 Computations on GPU devices")
    section_9_1_tensors_on_device(args.device)
    if args.benchmark:  # EXTRA: Exercise A.4, then the GPU guide's tensor cores, timed
        devices.exercise_a4(args.sizes)
        gpu_articles.tensor_cores(max(args.sizes))

    runner.heading("9.2 Single-GPU training")
    train_loader, test_loader = toy_loaders(args.batch_size)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # NEW: the device
    if device.type == "cpu":  # NEW: the text's variant for Apple-silicon Macs
        device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    device = args.device or device  # EXTRA: --device, where given, overrides the choice above
    model = model.to(device)  # NEW: the parameters move to the device
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses = train(model, train_loader, optimizer, args.epochs, device, args.amp)

    runner.heading("9.2 compute_accuracy")
    print("Training accuracy:", compute_accuracy(model, train_loader, device=device))
    print("Test accuracy:", compute_accuracy(model, test_loader, device=device))

    # EXTRA: the two GPU articles (--gpu-guides) on the device chosen above, and --plot
    if args.gpu_guides:
        gpu_articles.run_gpu_articles(device, args)
    if args.plot is not None:
        plots.plot_training(losses, model, args.plot)


if __name__ == "__main__":
    runner.run(main)
