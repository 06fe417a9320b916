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
import sys
from datetime import timedelta

import torch
import torch.distributed as dist  # NEW: process groups and collectives
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP  # NEW: the model wrapper
from torch.utils.data import DataLoader

from common import NeuralNetwork, ToyDataset, compute_accuracy, toy_data
from common.checkpoint import CheckpointError
from common.cli import add_training_flags, heading, make_parser, run
from common.distributed import (
    DistEnv,
    DistributedBatchSampler,
    add_ddp_flags,
    check_ddp_flags,
    choose_backend,
    count_correct_globally,
    fit_training_data,
    gives_full_batches,
    print_line,
    samples_needed,
    store_for_this_attempt,
    timed,
)
from common.snapshot import Snapshot


def parse_args(env: DistEnv, argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    add_training_flags(parser)
    add_ddp_flags(parser)  # EXTRA: --device, --num-samples, --timeout, --log-every, --snapshot
    args = parser.parse_args(argv)
    check_ddp_flags(parser, args, env)  # EXTRA: clear errors before any process group exists
    return args


def ddp_setup(env: DistEnv, device: torch.device, timeout_s: float) -> None:
    """NEW: join the process group: NCCL between CUDA GPUs, gloo everywhere else (EXTRA: the
    tutorial asks for NCCL on every platform but Windows, so it fails on CPUs and Macs)."""
    backend = choose_backend(device.type)
    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"  # NEW: the TCP store without libuv, as Windows needs
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NEW: this process's GPU, by LOCAL_RANK
    dist.init_process_group(backend=backend, rank=env.rank,  # EXTRA: global RANK, not LOCAL
                            world_size=env.world_size,
                            timeout=timedelta(seconds=timeout_s),  # EXTRA: bounded waits
                            store=store_for_this_attempt(env, timedelta(seconds=timeout_s)))


def prepare_dataset(args: argparse.Namespace, env: DistEnv
                    ) -> tuple[DataLoader, DataLoader, ToyDataset, ToyDataset]:
    X_train, y_train, X_test, y_test = toy_data()
    num_samples = args.num_samples or len(y_train)
    if not gives_full_batches(num_samples, env.world_size, args.batch_size):
        # EXTRA: the tutorial asks the reader to uncomment lines here; we enlarge as needed
        num_samples = samples_needed(env.world_size, args.batch_size)
        if env.rank == 0:
            print_line(f"Note: {len(y_train)} examples leave some of the {env.world_size} "
                       f"processes without a full batch of {args.batch_size}; training on "
                       f"{num_samples} (the examples plus noisy copies; see --num-samples).")
    X_train, y_train = fit_training_data(X_train, y_train, num_samples, args.seed)
    train_ds = ToyDataset(X_train, y_train)
    test_ds = ToyDataset(X_test, y_test)

    train_loader = DataLoader(
        train_ds,
        batch_size=None,  # EXTRA: the sampler yields whole batches of indices (see below)
        shuffle=False,  # NEW: the sampler shuffles instead
        num_workers=0,
        # NEW: a disjoint slice of the data for each process (the tutorial's
        # DistributedSampler; EXTRA: in batches, each fetched by one indexing operation)
        sampler=DistributedBatchSampler(train_ds, batch_size=args.batch_size),
    )
    test_loader = DataLoader(test_ds, batch_size=2, shuffle=False, num_workers=0)
    return train_loader, test_loader, train_ds, test_ds


def train(model: torch.nn.Module, train_loader: DataLoader,
          optimizer: torch.optim.Optimizer, num_epochs: int,
          device: torch.device, prefix: str,  # NEW: the prefix names the process
          snapshot: Snapshot, start_epoch: int,  # EXTRA: resuming
          log_every: int) -> None:  # EXTRA: a loss line every log_every batches
    for epoch in range(start_epoch, num_epochs):
        train_loader.sampler.set_epoch(epoch)  # NEW: a new shuffle every epoch
        model.train()
        for batch_idx, (features, labels) in enumerate(train_loader):
            features, labels = features.to(device), labels.to(device)
            logits = model(features)
            loss = F.cross_entropy(logits, labels)  # works on the logits, no softmax needed

            optimizer.zero_grad()  # otherwise gradients accumulate across batches
            loss.backward()  # NEW (inside DDP): gradients are averaged across processes
            optimizer.step()

            # LOGGING (EXTRA: print_line writes whole lines, so ranks never splice)
            if batch_idx % log_every == 0:
                print_line(f"{prefix} Epoch: {epoch + 1:03d}/{num_epochs:03d}"
                           f" | Batchsize {labels.shape[0]:03d}"
                           f" | Train/Val Loss: {loss:.2f}")
        model.eval()
        # Optional model evaluation would go here
        snapshot.save(epochs_completed=epoch + 1)  # EXTRA: rank 0 saves for resuming


def evaluate(model: DDP, loaders: tuple[DataLoader, DataLoader, ToyDataset, ToyDataset],
             env: DistEnv, device: torch.device, prefix: str) -> None:
    train_loader, test_loader, train_ds, test_ds = loaders
    # As in the tutorial: each process scores its own training slice and the whole test set
    print_line(f"{prefix} Training accuracy {compute_accuracy(model, train_loader, device)}")
    print_line(f"{prefix} Test accuracy {compute_accuracy(model, test_loader, device)}")
    # EXTRA: one figure for the whole run, every example counted exactly once
    for name, dataset in (("training", train_ds), ("test", test_ds)):
        correct, total = count_correct_globally(model.module, dataset, env, device, 64)
        if env.rank == 0:
            print_line(f"Global {name} accuracy over all {env.world_size} processes: "
                       f"{correct / total} ({correct} of {total} examples)")


def train_tutorial_model(args: argparse.Namespace, env: DistEnv) -> None:
    """Section 9.3's setup, loop and evaluation in this process."""
    device = args.device
    prefix = f"[{'GPU' if device.type == 'cuda' else 'CPU'}{env.rank}]"  # NEW: which process
    loaders = prepare_dataset(args, env)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    snapshot = Snapshot(args.snapshot, model, optimizer, env.rank)  # EXTRA: --snapshot
    start_epoch = snapshot.restore()
    if start_epoch:
        print_line(f"{prefix} Resuming from epoch {start_epoch} ({args.snapshot}): "
                   f"continuing with epoch {start_epoch + 1}")
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)  # NEW
    samples = (args.epochs - start_epoch) * len(loaders[0]) * args.batch_size * env.world_size
    with timed(env, samples):  # EXTRA: training time and throughput, on rank 0
        train(model, loaders[0], optimizer, args.epochs, device, prefix, snapshot, start_epoch,
              args.log_every)
    evaluate(model, loaders, env, device, prefix)


def main() -> None:
    env = DistEnv.from_environ()  # NEW: this process's rank among how many (from torchrun)
    args = parse_args(env)
    if env.rank == 0:
        heading("9.3 Training with multiple GPUs")
        print_line(f"PyTorch version: {torch.__version__}")
        print_line(f"CUDA available: {torch.cuda.is_available()}")
        print_line(f"Number of GPUs available: {torch.cuda.device_count()}")
        print_line(f"Processes: {env.world_size}, training on {args.device.type} "
                   f"with the {choose_backend(args.device.type)} backend")
    ddp_setup(env, args.device, args.timeout)
    try:
        train_tutorial_model(args, env)
    except CheckpointError as err:  # EXTRA: an unusable --snapshot file
        if env.rank == 0:
            print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    finally:
        gc.collect()  # EXTRA: free the DDP model before its group (avoids an abort at exit)
        dist.destroy_process_group()  # NEW: leave the process group (EXTRA: on errors too)


if __name__ == "__main__":
    run(main)
