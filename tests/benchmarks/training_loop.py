"""The DDP benchmark's workload: a08's data, model and training loop, with the benchmark's own
loader (fast_loader.py; --tutorial-loader keeps a08's) and no loss lines. Plain in one process,
DDP as in a08 under torchrun. Takes a08's flags; prints a08's timing line.

    python tests/benchmarks/training_loop.py --num-samples 65536 --batch-size 256
    torchrun --nproc_per_node=2 tests/benchmarks/training_loop.py --num-samples 65536 \\
        --batch-size 256
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import NeuralNetwork
from common.extras import (
    DDP_ENDING,
    TrainingRecord,
    free_model_and_wait_for_gloo,
    report_summary,
    run,
)

from fast_loader import fast_batch_loader

import a08_ddp_torchrun as a08
from a05_training_loop import Trained


def main() -> None:
    tutorial_loader = "--tutorial-loader" in sys.argv
    argv = [a for a in sys.argv[1:] if a != "--tutorial-loader"]
    args, launch, device = a08.extras.parse_a08_flags(a08.__doc__, argv)
    if launch.launched:
        a08.ddp_setup(launch.rank, launch.world_size, device, launch, args.timeout)
    else:  # a group of one, for the sampler and the clock
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    train_loader, test_loader = a08.prepare_dataset(args, launch.world_size, device)
    if not tutorial_loader:
        train_loader = fast_batch_loader(train_loader.dataset, args.batch_size)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(num_inputs=2, num_outputs=2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    if launch.launched:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    record = TrainingRecord(args, model, optimizer, device)
    for epoch in record.epochs(args.epochs):
        train_loader.sampler.set_epoch(epoch)
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            record.keep(loss)
    trained = Trained(model, train_loader, test_loader, record.losses, device, record.seconds)
    report_summary(trained, args.batch_size)  # a08's timing line (and its global accuracy)
    del model, trained
    free_model_and_wait_for_gloo()
    dist.destroy_process_group()


if __name__ == "__main__":
    run(main, DDP_ENDING)
