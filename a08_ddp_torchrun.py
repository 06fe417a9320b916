"""Section 9.3 of "PyTorch in One Hour": training with multiple GPUs (DistributedDataParallel).

Section 9.2's loop with 9.3's changes (NEW): a process group, DistributedSampler, DDP. GPUs or CPUs.

Run: torchrun --nproc_per_node=2 a08_ddp_torchrun.py   (or python a08_ddp_torchrun.py --spawn 2)
"""

import argparse
import os
import platform

import torch
import torch.distributed as dist  # NEW: process groups and collectives
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW: the model wrapper
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler  # NEW: a slice per process

from common import NeuralNetwork, ToyDataset, compute_accuracy, extras, toy_data


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = extras.make_parser(__doc__)
    extras.add_training_flags(parser)
    extras.add_plot_flag(parser)  # EXTRA: --plot PATH
    extras.add_ddp_flags(parser)  # EXTRA: --device, --snapshot, --fast-batches, ...
    args = parser.parse_args(argv)
    extras.check_ddp_flags(parser, args)  # EXTRA: clear errors before any process group exists
    return args


def ddp_setup(rank: int, world_size: int, args: argparse.Namespace) -> None:  # NEW: the group
    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"  # NEW: torch for Windows is built without libuv
    if args.device.type == "cuda":  # EXTRA: the text sets a GPU even where there is none
        torch.cuda.set_device(args.device)  # NEW: this process's GPU
    # NEW: NCCL between GPUs (Windows has none), gloo on CPUs (where the text asks for NCCL too)
    backend = "nccl" if args.device.type == "cuda" and dist.is_nccl_available() else "gloo"
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size,
                            timeout=args.timeout,  # EXTRA: a lost peer ends the run, no hang
                            store=extras.store_for_this_attempt(args.timeout))  # EXTRA: restarts


def prepare_dataset(args: argparse.Namespace) -> tuple[DataLoader, DataLoader]:
    X_train, y_train, X_test, y_test = toy_data()
    X_train, y_train = extras.enough_examples(X_train, y_train, args)  # EXTRA: N > 2 needs more
    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=args.batch_size,
        shuffle=False,  # NEW: False because of DistributedSampler below
        pin_memory=True,
        drop_last=True,
        # NEW: chunk the batches across processes without overlapping examples
        sampler=DistributedSampler(train_ds),
    )
    if args.fast_batches:  # EXTRA: the same batches, each fetched in one operation
        train_loader = extras.fast_batch_loader(train_ds, args.batch_size)
    test_loader = DataLoader(dataset=test_ds, batch_size=2, shuffle=False)
    return train_loader, test_loader


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int,
          device: torch.device, progress: extras.Progress) -> list[float]:  # EXTRA: progress
    losses = []  # EXTRA: kept for --plot
    for epoch in range(progress.first_epoch, num_epochs):  # EXTRA: first_epoch > 0 on resume
        train_loader.sampler.set_epoch(epoch)  # NEW: a new shuffle every epoch
        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):
            features, labels = features.to(device), labels.to(device)
            logits = model(features)
            loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()
            optimizer.step()
            losses.append(loss.item())

            # LOGGING
            if progress.logs(batch_idx):  # EXTRA: --log-every
                print(f"{extras.process_name(device)} Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                      f" | Batchsize {labels.shape[0]:03d}"
                      f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        # Optional model evaluation would go here
        progress.epoch_done(epoch)  # EXTRA: --snapshot
    return losses


def train_tutorial_model(args: argparse.Namespace) -> tuple:
    """Section 7's setup and loop; returns what main() goes on with."""
    train_loader, test_loader = prepare_dataset(args)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    device = args.device  # NEW: this process's GPU, or its CPU (see --device)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)  # NEW
    progress = extras.Progress(args, model, optimizer, train_loader)  # EXTRA: resume, time
    losses = train(model, train_loader, optimizer, args.epochs, device, progress)
    return model, train_loader, test_loader, losses, device


def main() -> None:
    args = parse_args()
    if args.spawn:  # EXTRA: --spawn N: N processes without torchrun, each running main()
        return extras.spawn(main, args.spawn)
    # NEW: this process's rank, and how many there are, from torchrun (or --spawn)
    rank = int(os.environ.get("RANK", 0))  # EXTRA: the global RANK, not the text's LOCAL_RANK
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if rank == 0:  # NEW: print once, not once per process
        extras.heading("9.3 Training with multiple GPUs")
        print("PyTorch version:", torch.__version__)
        print("CUDA available:", torch.cuda.is_available())
        print("Number of GPUs available:", torch.cuda.device_count())
    ddp_setup(rank, world_size, args)
    extras.describe_run(args.device)  # EXTRA: processes, device and backend, on rank 0
    model, train_loader, test_loader, losses, device = train_tutorial_model(args)
    name = extras.process_name(device)  # NEW: [GPU0], [GPU1], ... (on CPUs: [CPU0], ...)
    print(f"{name} Training accuracy", compute_accuracy(model, train_loader, device=device))
    print(f"{name} Test accuracy", compute_accuracy(model, test_loader, device=device))
    extras.report_global_accuracy(model, train_loader, test_loader, device)  # EXTRA: all in one

    if args.plot is not None:  # EXTRA: --plot
        extras.plot_training(losses, model, args.plot)
    del model  # EXTRA: free DDP and the parameters its hooks hold first (else: aborts at exit)
    extras.settle_before_leaving()  # EXTRA: collect them, let gloo's threads finish (else: hangs)
    dist.destroy_process_group()  # NEW: leave the process group


if __name__ == "__main__":
    extras.run(main)
