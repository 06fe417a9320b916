"""What a08 says beyond the tutorial's lines: each process's name, and rank 0's summary."""

from __future__ import annotations

from typing import Any

from common import compute_accuracy

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Subset


def process_name(device: torch.device) -> str:
    """[GPU0], [GPU1], ... as in the text, or [CPU0], ... on CPUs: the global rank."""
    return f"[{'GPU' if device.type == 'cuda' else 'CPU'}{dist.get_rank()}]"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


def report_summary(trained: Any, batch_size: int) -> None:
    """Rank 0's last lines, after every process's own: training time and throughput, accuracy
    over all processes with every example counted once (the text's DistributedSampler pads
    slices, and each process scores the whole test set), and whether the parameters agree."""
    counts = [count_correct_globally(unwrap(trained.model), loader.dataset, trained.device)
              for loader in (trained.train_loader, trained.test_loader)]  # all have printed
    same = parameters_identical_everywhere(trained.model)
    if dist.get_rank() != 0:
        return
    samples = len(trained.losses) * batch_size * dist.get_world_size()
    print(f"Training time: {trained.seconds:.3f} s for {samples} samples, "
          f"{samples / trained.seconds:.0f} samples/s over all processes (start-up excluded)")
    for name, (correct, total) in zip(("training", "test"), counts, strict=True):
        print(f"Global {name} accuracy over all {dist.get_world_size()} processes: "
              f"{correct / total} ({correct} of {total} examples)")
    print(f"Parameters identical in all {dist.get_world_size()} processes: {same} "
          f"(what averaging the gradients promises)")


def parameters_identical_everywhere(model: torch.nn.Module) -> bool:
    """Whether every process holds exactly rank 0's parameters, as DDP's gradient averaging
    promises (each trained on other examples). Collective."""
    mine = torch.cat([p.detach().reshape(-1) for p in unwrap(model).parameters()])
    rank_0s = mine.clone()
    dist.broadcast(rank_0s, src=0)
    differing = torch.tensor([int(not torch.equal(mine, rank_0s))], device=mine.device)
    dist.all_reduce(differing, op=dist.ReduceOp.SUM)
    return int(differing) == 0


def count_correct_globally(model: torch.nn.Module, dataset: Dataset,
                           device: torch.device) -> tuple[int, int]:
    """(correct, total) over the dataset: each process scores a disjoint slice with the
    tutorial's compute_accuracy; the counts are summed across processes."""
    mine = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    total = len(mine)
    correct = 0
    if total:  # a process may get no test example at all
        correct = round(compute_accuracy(model, DataLoader(mine, batch_size=64), device) * total)
    counts = torch.tensor([correct, total], dtype=torch.int64, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return int(counts[0]), int(counts[1])
