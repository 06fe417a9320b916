"""Section 9.3 of "PyTorch in One Hour": training with multiple GPUs (DistributedDataParallel).

Section 9.2's loop with the changes of section 9.3, each marked NEW: one process per device, a
process group, a DistributedSampler that gives each process its own slice of the data, and the
model wrapped in DDP, which averages the gradients of all processes after every backward pass.
Runs on GPUs with NCCL, and on CPUs (any laptop, Mac or Windows box) with gloo.
EXTRA marks what this companion adds beyond the tutorial.

Run: torchrun --nproc_per_node=2 a08_ddp_torchrun.py     (2 processes on this machine)
     python a08_ddp_torchrun.py                          (1 process, no torchrun needed)
"""

import argparse
import gc
import os
import platform
from datetime import timedelta

import torch
import torch.distributed as dist  # NEW: process groups and collectives
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW: the model wrapper
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler  # NEW: a slice per process

from common import NeuralNetwork, ToyDataset, compute_accuracy, toy_data
from common.extras import (
    Progress,
    enough_examples,
    fast_batch_loader,
    heading,
    parse_ddp_args,
    report_global_accuracy,
    run,
    store_for_this_attempt,
)


def choose_backend(device: torch.device, system: str | None = None) -> str:
    """NEW: NCCL between CUDA GPUs, as the text does, except on Windows (no NCCL there).
    EXTRA: gloo on CPUs and Macs too, where the text's NCCL cannot run."""
    on_windows = (system or platform.system()) == "Windows"
    if device.type == "cuda" and not on_windows and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def ddp_setup(rank: int, world_size: int, device: torch.device, timeout: timedelta) -> None:
    """NEW: join the process group, so that the processes can talk to each other."""
    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"  # NEW: torch for Windows is built without libuv
    if device.type == "cuda":  # EXTRA: the text sets a GPU even where there is none
        torch.cuda.set_device(device)  # NEW: this process's GPU
    dist.init_process_group(backend=choose_backend(device), rank=rank, world_size=world_size,
                            timeout=timeout,  # EXTRA: a lost peer ends the run, no hang
                            store=store_for_this_attempt(timeout))  # EXTRA: see its docstring


def process_name(device: torch.device) -> str:
    """NEW: which process printed a line: [GPU0], [GPU1], ... (EXTRA: [CPU0] on CPUs)."""
    return f"[{'GPU' if device.type == 'cuda' else 'CPU'}{dist.get_rank()}]"


def prepare_dataset(args: argparse.Namespace) -> tuple[DataLoader, DataLoader]:
    X_train, y_train, X_test, y_test = toy_data()
    # EXTRA: noisy copies where some process would get no full batch (the text: uncomment lines)
    X_train, y_train = enough_examples(X_train, y_train, args)
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
        train_loader = fast_batch_loader(train_ds, args.batch_size)
    test_loader = DataLoader(
        dataset=test_ds,
        batch_size=2,
        shuffle=False,
    )
    return train_loader, test_loader


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int,
          device: torch.device, progress: Progress) -> None:  # EXTRA: resume, log, time
    for epoch in range(progress.first_epoch, num_epochs):  # EXTRA: first_epoch > 0 on resume
        train_loader.sampler.set_epoch(epoch)  # NEW: a new shuffle every epoch
        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):
            features, labels = features.to(device), labels.to(device)
            logits = model(features)
            loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()  # NEW (inside DDP): gradients are averaged across processes
            optimizer.step()

            # LOGGING
            if progress.logs(batch_idx):  # EXTRA: --log-every
                print(f"{process_name(device)} Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                      f" | Batchsize {labels.shape[0]:03d}"
                      f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        # Optional model evaluation would go here
        progress.epoch_done(epoch)  # EXTRA: --snapshot


def train_tutorial_model(args: argparse.Namespace
                         ) -> tuple[torch.nn.Module, DataLoader, DataLoader, torch.device]:
    """Section 9.3's setup and loop: returns (model, train_loader, test_loader, device)."""
    train_loader, test_loader = prepare_dataset(args)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    device = args.device  # NEW: this process's GPU (EXTRA: or the CPU; see --device)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    progress = Progress(args, model, optimizer, process_name(device))  # EXTRA: may resume
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)  # NEW
    with progress.timed(len(train_loader) * args.batch_size):  # EXTRA: samples/s, on rank 0
        train(model, train_loader, optimizer, args.epochs, device, progress)
    return model, train_loader, test_loader, device


def train_and_evaluate(args: argparse.Namespace) -> None:
    model, train_loader, test_loader, device = train_tutorial_model(args)
    # As in the text: each process scores its own training slice and the whole test set
    train_acc = compute_accuracy(model, train_loader, device=device)
    print(f"{process_name(device)} Training accuracy", train_acc)
    test_acc = compute_accuracy(model, test_loader, device=device)
    print(f"{process_name(device)} Test accuracy", test_acc)
    # EXTRA: one figure for the whole run, every example counted exactly once
    report_global_accuracy(model, train_loader, test_loader, device)


def main() -> None:
    args = parse_ddp_args(__doc__)  # EXTRA: flags, checked before any process group exists
    # NEW: torchrun tells each process its rank and the number of processes; without it, one
    # (EXTRA: the global RANK, where the text reads LOCAL_RANK, wrong on two or more machines)
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if rank == 0:  # NEW: print once, not once per process
        heading("9.3 Training with multiple GPUs")
        print("PyTorch version:", torch.__version__)
        print("CUDA available:", torch.cuda.is_available())
        print("Number of GPUs available:", torch.cuda.device_count())
        # EXTRA: how many processes, on which device, with which backend
        print(f"Processes: {world_size}, training on {args.device.type} "
              f"with the {choose_backend(args.device)} backend")
    ddp_setup(rank, world_size, args.device, timedelta(seconds=args.timeout))
    try:
        train_and_evaluate(args)
    finally:
        gc.collect()  # EXTRA: free the DDP model before its group (avoids an abort at exit)
        dist.destroy_process_group()  # NEW: leave the process group (EXTRA: on errors too)


if __name__ == "__main__":
    run(main)
