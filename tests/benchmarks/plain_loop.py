"""The DDP benchmark's baseline: a08's data pipeline, model and training loop in one plain
process, without DistributedDataParallel. Takes a08's flags; prints a08's timing line.

Run: python tests/benchmarks/plain_loop.py --num-samples 65536 --batch-size 256 --log-every 100000
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common import NeuralNetwork
from common.extras import Snapshot, TrainingClock, report_summary, run

import a08_ddp_torchrun as a08


def main() -> None:
    args, _, device = a08.parse_args()
    # a group of one, only for the DistributedSampler inside a08's loader and the timer
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        train_loader, test_loader = a08.prepare_dataset(args, world_size=1, device=device)
        torch.manual_seed(args.seed)
        model = NeuralNetwork(num_inputs=2, num_outputs=2).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        snapshot = Snapshot(None, model, optimizer, {}, args.epochs)
        clock = TrainingClock()
        losses = a08.train(model, train_loader, optimizer, args.epochs, device, snapshot,
                           args.log_every, args.amp)
        # a08's timing line (and its global accuracy)
        report_summary(clock.stop(), len(losses), args.batch_size, model, train_loader,
                       test_loader, device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    run(main)
