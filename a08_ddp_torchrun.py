"""Section 9.3 of "PyTorch in One Hour": training with multiple GPUs (DistributedDataParallel).

Section 9.2's loop with 9.3's changes: a process group, a DistributedSampler, DDP. A line
marked NEW is the text's, as it writes it; a line marked EXTRA is ours, and where it stands in
the text's place it says which line. Ours let the same script run on CPUs, Macs and several
machines, and carry our options (--snapshot, --timeout, --device, --spawn); what each does, and
why, is said in the module it calls (common/processes.py, checkpoints.py, devices.py).

Run: torchrun --nproc_per_node=2 a08_ddp_torchrun.py   (or python a08_ddp_torchrun.py --spawn 2)
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader  # EXTRA: not Dataset: ToyDataset comes from common

# the new imports, in the text's order
import os  # NEW: torchrun's variables
import platform  # NEW: to tell Windows apart
from torch.utils.data.distributed import DistributedSampler  # NEW: splits the data
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW: the model's wrapper
from torch.distributed import init_process_group, destroy_process_group  # NEW: the group

from datetime import timedelta  # EXTRA: for --timeout

from common import NeuralNetwork, ToyDataset, compute_accuracy  # EXTRA: sections 5 to 7's
from common import checkpoints, devices, flags, processes, runner  # EXTRA: our machinery


# function to initialize a distributed process group (1 process / GPU)
# this allows communication among processes
def ddp_setup(rank, world_size, timeout=120, device="auto"):  # EXTRA: our options, defaulted
    """
    Arguments:
        rank: a unique process ID
        world_size: total number of processes in the group
    """
    # Only set MASTER_ADDR and MASTER_PORT if not already defined by torchrun
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "localhost"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "12345"

    # initialize process group
    if platform.system() == "Windows":
        # Disable libuv because PyTorch for Windows isn't built with support
        os.environ["USE_LIBUV"] = "0"
    # EXTRA: for the text's two calls: NCCL where each process has a GPU, else gloo; --timeout
    init_process_group(backend="nccl" if devices.gpu_of_its_own(device) else "gloo",
                       rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout),
                       store=processes.store_for_torchrun_restarts(timeout))

    if torch.distributed.get_backend() == "nccl":  # EXTRA: gloo's processes may have no GPU
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))  # EXTRA: for rank: see main


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

    # Uncomment these lines to increase the dataset size to run this script on up to 8 GPUs:
    # factor = 4
    # X_train = torch.cat([X_train + torch.randn_like(X_train) * 0.1 for _ in range(factor)])
    # y_train = y_train.repeat(factor)
    # X_test = torch.cat([X_test + torch.randn_like(X_test) * 0.1 for _ in range(factor)])
    # y_test = y_test.repeat(factor)
    # EXTRA: for the lines above: with 5 or more processes, a08 adds such copies itself
    X_train, y_train = processes.enough_for_every_process(X_train, y_train, batch_size=2)

    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=2,
        shuffle=False,  # NEW: False because of DistributedSampler below
        pin_memory=torch.distributed.get_backend() == "nccl",  # EXTRA: for True: CPUs warn
        drop_last=True,
        # NEW: chunk batches across GPUs without overlapping samples:
        sampler=DistributedSampler(train_ds)
    )
    test_loader = DataLoader(
        dataset=test_ds,
        batch_size=2,
        shuffle=False,
    )
    return train_loader, test_loader


# wrapper
def main(rank, world_size, num_epochs, snapshot=None, timeout=120, device="auto"):  # EXTRA: ours

    ddp_setup(rank, world_size, timeout=timeout, device=device)  # EXTRA: with our options

    train_loader, test_loader = prepare_dataset()  # NEW: the loaders, from prepare_dataset
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    # EXTRA: for rank as a device: it names no GPU on a CPU, nor on a second machine (RANK)
    device = torch.device("cuda" if torch.distributed.get_backend() == "nccl" else "cpu")
    kind = "GPU" if device.type == "cuda" else "CPU"  # EXTRA: for [GPU{rank}]: [CPU0] on CPUs
    model.to(device)  # EXTRA: for model.to(rank): the device above
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    first_epoch = checkpoints.resume(snapshot, model, optimizer, num_epochs, rank)  # EXTRA: resume
    model = DDP(model)  # EXTRA: for device_ids=[rank], which a CPU refuses: DDP finds it
    # the core model is now accessible as model.module

    for epoch in range(first_epoch, num_epochs):  # EXTRA: for range(num_epochs): --snapshot's
        # NEW: Set sampler to ensure each epoch has a different shuffle order
        train_loader.sampler.set_epoch(epoch)

        model.train()
        for features, labels in train_loader:  # NEW: no batch index

            features, labels = features.to(device), labels.to(device)  # EXTRA: for .to(rank)
            logits = model(features)

            loss = F.cross_entropy(logits, labels)  # Loss function

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            # LOGGING
            print(f"[{kind}{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d}"  # EXTRA: for [GPU{rank}]
                  f" | Batchsize {labels.shape[0]:03d}"
                  f" | Train/Val Loss: {loss:.2f}")

        model.eval()
        checkpoints.save_snapshot(snapshot, model.module, optimizer, epoch + 1, rank)  # EXTRA: save

    # EXTRA: for the text's try/except ZeroDivisionError: prepare_dataset gave each a batch
    train_acc = compute_accuracy(model, train_loader, device=device)  # EXTRA: for device=rank
    print(f"[{kind}{rank}] Training accuracy", train_acc)  # EXTRA: for [GPU{rank}]
    test_acc = compute_accuracy(model, test_loader, device=device)  # EXTRA: for device=rank
    print(f"[{kind}{rank}] Test accuracy", test_acc)  # EXTRA: for [GPU{rank}]

    processes.report_summary(model, (train_loader, test_loader), device)  # EXTRA: rank 0
    del model  # EXTRA: DDP freed before its group goes, else gloo may abort at exit
    processes.free_before_leaving()  # EXTRA: gloo's threads finish first
    destroy_process_group()  # NEW: cleanly exit distributed mode


if __name__ == "__main__":
    args = flags.a08(__doc__)  # EXTRA: our options, checked before any process waits
    # NEW: torchrun's variables where it set them, else a single process
    if "WORLD_SIZE" in os.environ:
        world_size = int(os.environ["WORLD_SIZE"])
    else:
        world_size = 1

    if "RANK" in os.environ:  # EXTRA: for LOCAL_RANK first: RANK counts every machine's
        rank = int(os.environ["RANK"])
    else:
        rank = 0

    # Only print on rank 0 to avoid duplicate prints from each GPU process
    if rank == 0:  # NEW: once, not once per process
        runner.heading("9.3 Training with multiple GPUs")  # EXTRA: a heading to find it by
        print("PyTorch version:", torch.__version__)
        print("CUDA available:", torch.cuda.is_available())
        print("Number of GPUs available:", torch.cuda.device_count())
        print(processes.LOSSES_NOTE)  # EXTRA: why the losses are not the blog's digits

    torch.manual_seed(123)
    num_epochs = 3
    # EXTRA: for main(rank, world_size, num_epochs): with our options, or in --spawn's processes
    processes.start(main, rank, world_size, num_epochs, spawn=args.spawn,
                    snapshot=args.snapshot, timeout=args.timeout, device=args.device)
