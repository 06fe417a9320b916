"""Section 9.3 of "PyTorch in One Hour": training with multiple GPUs (DistributedDataParallel).

Section 9.2's loop with 9.3's changes (NEW): a process group, DistributedSampler, DDP. GPUs or CPUs.

Run: torchrun --nproc_per_node=2 a08_ddp_torchrun.py   (or python a08_ddp_torchrun.py --spawn 2)
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

# the new imports, in the text's order
import os  # NEW: to read torchrun's variables
import platform  # NEW: to tell Windows apart
from torch.utils.data.distributed import DistributedSampler  # NEW: splits the data
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW: the model's wrapper
from torch.distributed import init_process_group, destroy_process_group  # NEW: the group

from datetime import timedelta  # EXTRA: how long a process waits for the others

from common import (
    NeuralNetwork,
    ToyDataset,
    checkpoints,
    compute_accuracy,
    devices,
    flags,
    processes,
    runner,
)


# NEW: every process joins one process group, through which the processes communicate
def ddp_setup(rank, world_size, timeout=120, device="auto"):  # EXTRA: our settings' defaults
    """
    rank: this process's number, from 0
    world_size: how many processes there are in all
    """
    # where process 0 listens (torchrun sets both; one process here needs them too)
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "localhost"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "12345"

    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"  # torch for Windows is built without libuv
    # EXTRA: NCCL where each process has a GPU of its own, as on the text's GPU machines; gloo
    # elsewhere, where NCCL cannot run (a laptop, a Mac, Windows, more processes than GPUs)
    backend = "nccl" if devices.gpu_of_its_own(device) else "gloo"
    # EXTRA: one call with that backend, for the text's two (gloo on Windows, else nccl)
    init_process_group(backend=backend, rank=rank, world_size=world_size,
                       timeout=timedelta(seconds=timeout),  # EXTRA: how long to wait for them
                       # EXTRA: where torchrun restarts a failed process, a store it can use
                       store=processes.store_for_torchrun_restarts(timeout))

    if backend == "nccl":  # EXTRA: set_device needs a GPU, which gloo's processes may lack
        # EXTRA: this machine's GPU is LOCAL_RANK, as rank here is the global RANK (__main__)
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))


def prepare_dataset():  # NEW: section 6's data and loaders, in a function
    X_train = torch.tensor([
        [-1.2, 3.1],
        [-0.9, 2.9],
        [-0.5, 2.6],
        [2.3, -1.1],
        [2.7, -1.5]
    ])
    y_train = torch.tensor([0, 0, 0, 1, 1])

    X_test = torch.tensor([
        [-0.8, 2.8],
        [2.6, -1.6],
    ])
    y_test = torch.tensor([0, 1])

    # The text's remedy for up to 8 GPUs, as five lines to uncomment:
    # factor = 4
    # X_train = torch.cat([X_train + torch.randn_like(X_train) * 0.1 for _ in range(factor)])
    # y_train = y_train.repeat(factor)
    # X_test = torch.cat([X_test + torch.randn_like(X_test) * 0.1 for _ in range(factor)])
    # y_test = y_test.repeat(factor)
    # EXTRA: with 5 or more processes every process gets one example, so none has a batch
    # (drop_last): there the text stops, its try/except saying the script is for 2 GPUs and
    # to uncomment the five lines above; a08 adds such noisy copies itself, and says so
    X_train, y_train = processes.enough_for_every_process(X_train, y_train, batch_size=2)

    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=2,
        shuffle=False,  # NEW: False because of DistributedSampler below
        # NEW: pinned memory; EXTRA: only for GPUs, as pinning speeds copies to one (CPUs warn)
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
# EXTRA: our settings (snapshot=, timeout=, device=) have defaults: the text's call still runs
def main(rank, world_size, num_epochs, snapshot=None, timeout=120, device="auto"):
    # NEW: join the process group; EXTRA: with our settings
    ddp_setup(rank, world_size, timeout=timeout, device=device)

    train_loader, test_loader = prepare_dataset()  # NEW: the loaders, from prepare_dataset
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    # EXTRA: where the lines marked "not rank" move to: ddp_setup's GPU, or the CPU (gloo)
    device = torch.device("cuda" if torch.distributed.get_backend() == "nccl" else "cpu")
    kind = "GPU" if device.type == "cuda" else "CPU"  # EXTRA: [CPU0] says where it trains
    # NEW: .to(rank); EXTRA: not rank, as two of our changes need: with gloo (ddp_setup) a
    # process may have no GPU, and the global RANK (__main__) names none on a second machine
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    # EXTRA: with --snapshot, the model and optimizer saved there, and the epoch to go on from
    first_epoch = checkpoints.resume(snapshot, model, optimizer, num_epochs, rank)
    # NEW: DDP averages the processes' gradients; EXTRA: no device_ids=[rank] (not rank, as
    # above), which a model on the CPU refuses: DDP finds the model's device itself
    model = DDP(model)
    # the model itself is now model.module

    for epoch in range(first_epoch, num_epochs):  # EXTRA: from the snapshot's epoch, or 0
        train_loader.sampler.set_epoch(epoch)  # NEW: a different shuffle in every epoch

        model.train()
        for features, labels in train_loader:  # NEW: no batch index

            # NEW: .to(rank); EXTRA: not rank (see model.to): the device, as the model's
            features, labels = features.to(device), labels.to(device)
            logits = model(features)

            loss = F.cross_entropy(logits, labels)  # Loss function

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            # LOGGING
            # NEW: [GPU{rank}] first, the batch's size (not index); EXTRA: {kind}: CPU on CPUs
            print(f"[{kind}{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d}"
                  f" | Batchsize {labels.shape[0]:03d}"
                  f" | Train/Val Loss: {loss:.2f}")

        model.eval()
        # Optional model evaluation
        # EXTRA: with --snapshot, rank 0 saves the model, the optimizer and the epoch
        checkpoints.save_snapshot(snapshot, model.module, optimizer, epoch + 1, rank)

    # EXTRA: no try/except ZeroDivisionError here, the text's stop for 5 or more processes:
    # every process has a batch (prepare_dataset)
    # NEW: device=rank; EXTRA: not rank (see model.to): the device
    train_acc = compute_accuracy(model, train_loader, device=device)
    # NEW: [GPU{rank}] first; EXTRA: {kind} (see the loop's print)
    print(f"[{kind}{rank}] Training accuracy", train_acc)
    # NEW: device=rank; EXTRA: not rank (see model.to): the device
    test_acc = compute_accuracy(model, test_loader, device=device)
    # NEW: [GPU{rank}] first; EXTRA: {kind} (see the loop's print)
    print(f"[{kind}{rank}] Test accuracy", test_acc)

    # EXTRA: rank 0 prints accuracy over all processes, every example counted once
    processes.report_summary(model, (train_loader, test_loader), device)
    del model  # EXTRA: DDP freed before its group goes, else gloo may abort at exit
    processes.free_before_leaving()  # EXTRA: gloo's threads finish, else a hang or an abort
    destroy_process_group()  # NEW: leave the process group


if __name__ == "__main__":
    # EXTRA: our command-line options (--snapshot, --spawn, ...), checked before any process
    # waits for another
    args = flags.a08(__doc__)
    # NEW: torchrun's variables, where it started this process; else one process
    if "WORLD_SIZE" in os.environ:
        world_size = int(os.environ["WORLD_SIZE"])
    else:
        world_size = 1
    # EXTRA: the global RANK, for two machines: the text reads LOCAL_RANK first, the same
    # number on its one machine, but repeated on every machine
    if "RANK" in os.environ:
        rank = int(os.environ["RANK"])
    else:
        rank = 0

    # NEW: print once, not once per process
    if rank == 0:
        runner.heading("9.3 Training with multiple GPUs")  # EXTRA: a heading to find it by
        print("PyTorch version:", torch.__version__)
        print("CUDA available:", torch.cuda.is_available())
        print("Number of GPUs available:", torch.cuda.device_count())

    torch.manual_seed(123)
    num_epochs = 3
    # EXTRA: our options reach main as keywords; --spawn N starts N processes itself, as the
    # book's DDP-script.py does
    settings = dict(snapshot=args.snapshot, timeout=args.timeout, device=args.device)
    if args.spawn:
        processes.spawn(main, args.spawn, num_epochs, **settings)
    else:
        # EXTRA: the text's main(rank, world_size, num_epochs), with our settings, run so that
        # an error or Ctrl-C ends in one line
        runner.run(main, rank, world_size, num_epochs, **settings)
