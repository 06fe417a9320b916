"""Section 9.3 of "PyTorch in One Hour": training with multiple GPUs (DistributedDataParallel).

Section 9.2's loop with 9.3's changes (NEW): a process group, DistributedSampler, DDP. GPUs or CPUs.

Run: torchrun --nproc_per_node=2 a08_ddp_torchrun.py   (or python a08_ddp_torchrun.py --spawn 2)
"""

import argparse
import os
import platform
from datetime import timedelta

from common import NeuralNetwork, ToyDataset, compute_accuracy, extras, toy_data

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group  # NEW: process groups
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW: the model wrapper
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler  # NEW: a slice per process

from a05_training_loop import Trained


def ddp_setup(rank: int, world_size: int, device: torch.device,
              launch: extras.Launch, timeout: timedelta) -> None:  # EXTRA: the last three
    # NEW: where the processes meet, unless torchrun has set it already
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "localhost"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "12345"
    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"  # NEW: torch for Windows is built without libuv
    # NEW: NCCL between GPUs (not on Windows), else gloo
    # EXTRA: gloo on CPUs too; a timeout, a store, NCCL's GPU; a GPU set only where there is one
    backend = "nccl" if device.type == "cuda" and platform.system() != "Windows" else "gloo"
    init_process_group(backend=backend, rank=rank, world_size=world_size,
                       **extras.process_group_options(device, launch, timeout))
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NEW: this process's GPU


def prepare_dataset(args: argparse.Namespace, world_size: int,
                    device: torch.device) -> tuple[DataLoader, DataLoader]:  # EXTRA: the args
    X_train, y_train, X_test, y_test = toy_data()
    # NEW: the text's remedy for 5 or more GPUs, where 5 examples leave one without a batch:
    # factor = 4
    # X_train = torch.cat([X_train + torch.normal(0, 0.1, X_train.shape) for _ in range(factor)])
    # y_train = y_train.repeat(factor)
    # EXTRA: instead, as many noisy copies as the processes need, added only where they do
    X_train, y_train = extras.enlarge_for_processes(X_train, y_train, world_size, args)
    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=args.batch_size,
        shuffle=False,  # NEW: False because of DistributedSampler below
        # NEW: pin_memory=True: page-locked batches copy to a GPU faster
        pin_memory=device.type == "cuda",  # EXTRA: on CPUs, no CUDA context on GPU 0 each
        drop_last=True,
        # NEW: chunk the batches across processes without overlapping examples
        sampler=DistributedSampler(train_ds),
    )
    test_loader = DataLoader(dataset=test_ds, batch_size=2, shuffle=False)
    return train_loader, test_loader


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int,
          device: torch.device,  # NEW: the device to train on
          record: extras.TrainingRecord, amp: str | None) -> None:  # EXTRA: the last two
    for epoch in record.epochs(num_epochs):  # EXTRA: from --snapshot's epoch, saving each
        train_loader.sampler.set_epoch(epoch)  # NEW: a new shuffle every epoch
        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):
            features, labels = features.to(device), labels.to(device)  # NEW: batch to device
            with extras.autocast(device, amp):  # EXTRA: --amp, mixed precision
                logits = model(features)
                loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()
            optimizer.step()
            record.keep(loss)  # EXTRA: kept for --plot; a diverged run stops, saves nothing

            # LOGGING
            print(f"{extras.process_name(device)} Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                  f" | Batchsize {labels.shape[0]:03d}"
                  f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        # Optional model evaluation would go here


def train_tutorial_model(args: argparse.Namespace, device: torch.device,
                         world_size: int) -> Trained:  # EXTRA: device, world_size
    """Section 7's setup and loop."""
    train_loader, test_loader = prepare_dataset(args, world_size, device)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    model = model.to(device)  # NEW: the parameters move to the device
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)  # NEW
    # EXTRA: what rank 0 says of the run, --snapshot, the clock of all processes, the losses
    record = extras.TrainingRecord(args, model, optimizer, device)
    train(model, train_loader, optimizer, args.epochs, device, record, args.amp)
    return Trained(model, train_loader, test_loader, record.losses, device, record.seconds)


def main() -> None:
    # EXTRA: the flags and torchrun's variables, checked; --spawn; global RANK, not LOCAL_RANK
    args, launch, device = extras.parse_a08_flags(__doc__)
    if launch.spawn:  # N processes on this machine, each running main()
        return extras.spawn(main, launch.spawn)
    rank, world_size = launch.rank, launch.world_size
    if rank == 0:  # NEW: print once, not once per process
        extras.heading("9.3 Training with multiple GPUs")
        print("PyTorch version:", torch.__version__)
        print("CUDA available:", torch.cuda.is_available())
        print("Number of GPUs available:", torch.cuda.device_count())
    ddp_setup(rank, world_size, device, launch, args.timeout)

    trained = train_tutorial_model(args, device, world_size)
    model, device = trained.model, trained.device

    name = extras.process_name(device)  # NEW: [GPU0], [GPU1], ... (on CPUs: [CPU0], ...)
    print(f"{name} Training accuracy", compute_accuracy(model, trained.train_loader, device=device))
    print(f"{name} Test accuracy", compute_accuracy(model, trained.test_loader, device=device))

    # EXTRA: rank 0's summary, --plot, and DDP freed before its group (else: aborts, or hangs)
    extras.report_summary(trained, args.batch_size)
    if args.plot is not None:
        extras.plot_training(trained.losses, model, args.plot)
    del model, trained
    extras.free_model_and_wait_for_gloo()
    destroy_process_group()  # NEW: leave the process group


if __name__ == "__main__":
    extras.run(main, extras.DDP_ENDING)  # EXTRA: a08's errors, signals and teardown
