"""Section 9.3 of "PyTorch in One Hour": training with multiple GPUs (DistributedDataParallel).

Section 9.2's loop with 9.3's changes (NEW): a process group, DistributedSampler, DDP. GPUs or CPUs.

Run: torchrun --nproc_per_node=2 a08_ddp_torchrun.py   (or python a08_ddp_torchrun.py --spawn 2)
"""

import argparse
import os
import platform
from datetime import timedelta

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group  # NEW: process groups
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW: the model wrapper
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler  # NEW: a slice per process

from common import (
    NeuralNetwork,
    ToyDataset,
    checkpoints,
    compute_accuracy,
    devices,
    flags,
    plots,
    processes,
    runner,
    toy_data,
)


def ddp_setup(rank: int, world_size: int, device: torch.device, timeout: float) -> None:
    # NEW: where the processes meet, unless torchrun has set it already
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "localhost"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "12345"
    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"  # NEW: torch for Windows is built without libuv
    # NEW: NCCL between GPUs, gloo elsewhere (Windows: a08 trains on CPUs there)
    backend = "nccl" if device.type == "cuda" else "gloo"
    init_process_group(backend=backend, rank=rank, world_size=world_size,
                       timeout=timedelta(seconds=timeout),  # EXTRA: --timeout
                       store=processes.store_for_torchrun_restarts(timeout))  # EXTRA
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NEW: this process's GPU


def prepare_dataset(args: argparse.Namespace, world_size: int,
                    device: torch.device) -> tuple[DataLoader, DataLoader]:
    X_train, y_train, X_test, y_test = toy_data()
    # NEW: the text's remedy for 5 or more GPUs, where 5 examples leave one without a batch:
    # factor = 4
    # X_train = torch.cat([X_train + torch.normal(0, 0.1, X_train.shape) for _ in range(factor)])
    # y_train = y_train.repeat(factor)
    # EXTRA: instead, as many noisy copies as the processes need, added only where they do
    X_train, y_train = processes.enlarge_for_processes(
        X_train, y_train, world_size, args.num_samples, args.batch_size, args.seed)
    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=args.batch_size,
        shuffle=False,  # NEW: False because of DistributedSampler below
        pin_memory=device.type == "cuda",  # NEW: faster copies to a GPU (on CPUs: no use)
        drop_last=True,
        # NEW: chunk the batches across processes without overlapping examples
        sampler=DistributedSampler(train_ds),
    )
    test_loader = DataLoader(dataset=test_ds, batch_size=2, shuffle=False)
    return train_loader, test_loader


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int,
          device: torch.device,  # NEW: the device to train on
          args: argparse.Namespace, settings: dict,  # EXTRA: the last three
          first_epoch: int) -> list[float]:
    losses = []  # EXTRA: kept for --plot
    name = processes.process_name(device)  # NEW: [GPU0], [GPU1], ... (on CPUs: [CPU0], ...)
    for epoch in range(first_epoch, num_epochs):
        train_loader.sampler.set_epoch(epoch)  # NEW: a new shuffle every epoch
        model.train()
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)  # NEW: batch to device
            with devices.autocast(device, args.amp):  # EXTRA: --amp, mixed precision
                logits = model(features)
                loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()
            optimizer.step()
            losses.append(runner.require_finite_loss(loss.item()))  # EXTRA: diverged: stop

            # LOGGING
            print(f"{name} Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                  f" | Batchsize {labels.shape[0]:03d}"
                  f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        if args.snapshot and torch.distributed.get_rank() == 0:  # EXTRA: --snapshot, by rank 0
            checkpoints.Snapshot(model.module.state_dict(), optimizer.state_dict(), epoch + 1,
                                 settings).save(args.snapshot)
    return losses


def main(rank: int, world_size: int, num_epochs: int,  # NEW: one call per process
         args: argparse.Namespace) -> None:  # EXTRA: our flags
    device = processes.device_of_this_process(args.device)  # EXTRA: its GPU, or the CPU
    ddp_setup(rank, world_size, device, args.timeout)

    train_loader, test_loader = prepare_dataset(args, world_size, device)
    torch.manual_seed(args.seed)  # EXTRA: here too, for --spawn's processes
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    model = model.to(device)  # NEW: the parameters move to the device
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    name = processes.process_name(device)  # NEW: [GPU0], [GPU1], ... as in train()
    # EXTRA: --snapshot, resumed where its settings are this run's
    settings = {setting: getattr(args, setting) for setting in checkpoints.SETTINGS}
    first_epoch = checkpoints.resume(args.snapshot, model, optimizer, settings, num_epochs, name)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)  # NEW
    losses = train(model, train_loader, optimizer, num_epochs, device, args, settings,
                   first_epoch)

    print(f"{name} Training accuracy", compute_accuracy(model, train_loader, device=device))
    print(f"{name} Test accuracy", compute_accuracy(model, test_loader, device=device))

    # EXTRA: rank 0's summary over all processes, --plot, and DDP freed before its group
    processes.report_summary(model, (train_loader, test_loader), device)
    if args.plot is not None and rank == 0:
        plots.plot_training(losses, model.module, args.plot)
    del model
    processes.free_before_leaving()
    destroy_process_group()  # NEW: leave the process group


if __name__ == "__main__":
    args = flags.a08(__doc__)  # EXTRA: our flags and torchrun's variables, checked
    # NEW: torchrun's variables, where it started this process; else one process
    if "WORLD_SIZE" in os.environ:
        world_size = int(os.environ["WORLD_SIZE"])
    else:
        world_size = 1
    if "RANK" in os.environ:  # EXTRA: the global RANK (the text reads LOCAL_RANK first)
        rank = int(os.environ["RANK"])
    else:
        rank = 0

    # NEW: print once, not once per process
    if rank == 0:
        runner.heading("9.3 Training with multiple GPUs")
        print("PyTorch version:", torch.__version__)
        print("CUDA available:", torch.cuda.is_available())
        print("Number of GPUs available:", torch.cuda.device_count())

    torch.manual_seed(args.seed)
    num_epochs = args.epochs
    if args.spawn:  # EXTRA: --spawn N starts N processes, as the book's DDP-script.py does
        processes.spawn(main, args.spawn, num_epochs, args)
    else:
        runner.run(main, rank, world_size, num_epochs, args)
