"""Section 9.3 of "PyTorch in One Hour": training with multiple GPUs (DistributedDataParallel).

Section 9.2's loop with 9.3's changes (NEW): a process group, DistributedSampler, DDP. GPUs or CPUs.

Run: torchrun --nproc_per_node=2 a08_ddp_torchrun.py   (or python a08_ddp_torchrun.py --spawn 2)
"""

import os  # NEW
import platform  # NEW

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group  # NEW
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler  # NEW

from common import (
    NeuralNetwork,
    ToyDataset,
    checkpoints,
    compute_accuracy,
    devices,
    flags,
    processes,
    runner,
    toy_data,
)


# NEW: every process joins one process group, through which the processes communicate
def ddp_setup(rank, world_size):
    """
    rank: this process's number, from 0
    world_size: how many processes there are in all
    """
    args = flags.a08_settings()  # EXTRA: --device, --timeout (this process's command line)
    # where process 0 listens (torchrun sets both; one process here needs them too)
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "localhost"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "12345"

    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"  # torch for Windows is built without libuv
    # FIXED: the text asks for NCCL everywhere but Windows; NCCL needs a GPU in every process,
    # so gloo on CPUs (a laptop, a Mac, Windows, more processes than GPUs)
    backend = "nccl" if devices.gpu_of_its_own(args.device) else "gloo"
    init_process_group(backend=backend, rank=rank, world_size=world_size,
                       **processes.group_options(args.timeout))  # EXTRA: --timeout; restarts

    if backend == "nccl":  # FIXED: the text's set_device(rank) takes the rank across machines
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))  # this machine's GPU


def prepare_dataset():
    args = flags.a08_settings()  # EXTRA: --batch-size and --num-samples
    X_train, y_train, X_test, y_test = toy_data()

    # The text's remedy for up to 8 GPUs, as five lines to uncomment:
    # factor = 4
    # X_train = torch.cat([X_train + torch.randn_like(X_train) * 0.1 for _ in range(factor)])
    # y_train = y_train.repeat(factor)
    # X_test = torch.cat([X_test + torch.randn_like(X_test) * 0.1 for _ in range(factor)])
    # y_test = y_test.repeat(factor)
    # FIXED: instead, with 5 or more processes (where one would get no batch and accuracy
    # divides by zero), noisy copies of the training examples, and a note that says so
    X_train, y_train = processes.enough_for_every_process(X_train, y_train, args.num_samples,
                                                          args.batch_size)

    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=args.batch_size,
        shuffle=False,  # NEW: False because of DistributedSampler below
        # FIXED: the text's True; pinned memory speeds copies to a GPU, and warns without one
        pin_memory=torch.distributed.get_backend() == "nccl",
        drop_last=True,
        # NEW: each process gets its own slice of the examples, no two the same
        sampler=DistributedSampler(train_ds),
    )
    test_loader = DataLoader(
        dataset=test_ds,
        batch_size=2,
        shuffle=False,
    )
    return train_loader, test_loader


# NEW: everything one process does, from joining the group to leaving it
def main(rank, world_size, num_epochs):
    args = flags.a08_settings()  # EXTRA: --snapshot and its settings

    ddp_setup(rank, world_size)  # NEW

    train_loader, test_loader = prepare_dataset()
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    # FIXED: the text's model.to(rank) takes the rank for a GPU: here, ddp_setup's GPU or the CPU
    device = torch.device("cuda" if torch.distributed.get_backend() == "nccl" else "cpu")
    kind = "GPU" if device.type == "cuda" else "CPU"  # FIXED: [CPU0] in processes on CPUs
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    first_epoch = checkpoints.resume(args.snapshot, model, optimizer,  # EXTRA: --snapshot
                                     checkpoints.settings_of(args), num_epochs, rank)
    model = DDP(model)  # NEW: DDP finds the model's device (the text's device_ids=[rank]: a GPU)
    # the model itself is now model.module

    for epoch in range(first_epoch, num_epochs):
        # NEW: a different shuffle in every epoch
        train_loader.sampler.set_epoch(epoch)

        model.train()
        for features, labels in train_loader:

            features, labels = features.to(device), labels.to(device)  # NEW: to the device
            logits = model(features)
            loss = F.cross_entropy(logits, labels)  # Loss function

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            # LOGGING
            print(f"[{kind}{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d}"
                  f" | Batchsize {labels.shape[0]:03d}"
                  f" | Train/Val Loss: {loss:.2f}")

        model.eval()
        if rank == 0 and args.snapshot:  # EXTRA: --snapshot, saved by rank 0 after each epoch
            checkpoints.Snapshot(model.module.state_dict(), optimizer.state_dict(), epoch + 1,
                                 checkpoints.settings_of(args)).save(args.snapshot)

    # (the text's try/except ZeroDivisionError: no process here lacks a batch, see above)
    train_acc = compute_accuracy(model, train_loader, device=device)
    print(f"[{kind}{rank}] Training accuracy", train_acc)
    test_acc = compute_accuracy(model, test_loader, device=device)
    print(f"[{kind}{rank}] Test accuracy", test_acc)

    processes.report_summary(model, (train_loader, test_loader), device)  # EXTRA: all ranks
    del model  # FIXED: DDP freed before its group (else gloo may abort at exit)
    processes.free_before_leaving()
    destroy_process_group()  # NEW: leave the process group


if __name__ == "__main__":
    args = flags.a08(__doc__)  # EXTRA: our flags and torchrun's variables, checked
    # NEW: torchrun's variables, where it started this process; else one process
    if "WORLD_SIZE" in os.environ:
        world_size = int(os.environ["WORLD_SIZE"])
    else:
        world_size = 1
    if "RANK" in os.environ:  # FIXED: the global RANK (the text reads LOCAL_RANK first)
        rank = int(os.environ["RANK"])
    else:
        rank = 0

    # NEW: print once, not once per process
    if rank == 0:
        runner.heading("9.3 Training with multiple GPUs")
        print("PyTorch version:", torch.__version__)
        print("CUDA available:", torch.cuda.is_available())
        print("Number of GPUs available:", torch.cuda.device_count())

    torch.manual_seed(123)
    num_epochs = args.epochs  # EXTRA: --epochs (default 3: the text's num_epochs = 3)
    if args.spawn:  # EXTRA: --spawn N processes, as the book's DDP-script.py; else main, in
        processes.spawn(main, args.spawn, num_epochs)  # one line where it fails
    else:
        runner.run(main, rank, world_size, num_epochs)
