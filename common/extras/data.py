"""Training data beyond the tutorial's five examples: the one batch-size rule, noisy copies
where there are too few examples for the processes, and a08's --fast-batches."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator

from common import ToyDataset

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def gives_full_batches(num_samples: int, world_size: int, batch_size: int) -> bool:
    """Whether every process gets at least one full batch (the loaders drop the last, short
    one): DistributedSampler hands each process ceil(num_samples / world_size) examples, and
    one plain process has them all."""
    return math.ceil(num_samples / world_size) >= batch_size


def samples_needed(world_size: int, batch_size: int) -> int:
    """The fewest training examples that give every process one full batch."""
    return world_size * batch_size


def check_batch_fits(parser: argparse.ArgumentParser, batch_size: int,
                     num_examples: int) -> None:
    """a05 to a07: a batch larger than the data set would leave nothing to train on."""
    if not gives_full_batches(num_examples, 1, batch_size):
        parser.error(f"argument --batch-size: {batch_size} is larger than the "
                     f"{num_examples} training examples; use 1 to {num_examples}")


def enlarge_for_processes(X: torch.Tensor, y: torch.Tensor, requested: int | None,
                          world_size: int, batch_size: int,
                          seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """a08's training data: ``--num-samples`` examples if given (its flag check made sure they
    go round), else the examples as they are, or, where some process would get no full batch,
    as many noisy copies added as give each one a batch. Rank 0 says when it adds them."""
    num_samples = requested or len(y)
    if not gives_full_batches(num_samples, world_size, batch_size):
        num_samples = samples_needed(world_size, batch_size)
        if dist.get_rank() == 0:
            print(f"Note: {len(y)} examples leave some of the {world_size} processes without "
                  f"a full batch of {batch_size}; training on {num_samples} (the examples "
                  f"plus noisy copies; see --num-samples).")
    return with_noisy_copies(X, y, num_samples, seed)


def with_noisy_copies(X: torch.Tensor, y: torch.Tensor, num_samples: int,
                      seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``num_samples`` of: the examples themselves, then noisy copies of them
    (Gaussian noise with std 0.1, as the tutorial suggests), from a private generator so that
    the global random state, and with it the model's initial weights, stays the same."""
    if num_samples <= len(y):
        return X[:num_samples], y[:num_samples]
    copies = math.ceil(num_samples / len(y)) - 1
    generator = torch.Generator().manual_seed(seed)
    noise = 0.1 * torch.randn((copies, *X.shape), generator=generator)
    noisy = (X + noise).reshape(-1, *X.shape[1:])
    return torch.cat([X, noisy])[:num_samples], y.repeat(copies + 1)[:num_samples]


def fast_batch_loader(dataset: ToyDataset, batch_size: int) -> DataLoader:
    """``--fast-batches``: the batches of the tutorial's ``DataLoader(dataset, batch_size,
    shuffle=False, drop_last=True, sampler=DistributedSampler(dataset))``, the same ones in the
    same order, each fetched by one ``index_select``. The tutorial's loader turns every index
    into a Python int, fetches each example alone and stacks them, which costs more than the
    model's own forward and backward pass at large batch sizes."""
    batches = BatchGatheringDataset(dataset.features, dataset.labels)
    return DataLoader(batches, batch_size=None,
                      sampler=DistributedBatchSampler(batches, batch_size=batch_size))


class BatchGatheringDataset(ToyDataset):
    """A ToyDataset that also takes a whole tensor of indices, and gathers those rows with
    index_select: the same rows as features[indices], several times faster on CPU."""

    def __getitem__(self, index):
        if (isinstance(index, torch.Tensor) and index.dim() == 1
                and index.dtype in (torch.int32, torch.int64)):
            return self.features.index_select(0, index), self.labels.index_select(0, index)
        return super().__getitem__(index)


def index_dtype(n: int) -> torch.dtype:
    """The smaller integer type that can index ``n`` examples."""
    return torch.int32 if n <= torch.iinfo(torch.int32).max else torch.int64


class DistributedBatchSampler(DistributedSampler):
    """The batches that ``DataLoader(ds, batch_size=B, drop_last=True,
    sampler=DistributedSampler(ds))`` makes, the same indices in the same order, but each batch
    as one index tensor, for ``DataLoader(ds, batch_size=None, sampler=...)``."""

    def __init__(self, dataset: Dataset, batch_size: int, **kwargs) -> None:
        super().__init__(dataset, **kwargs)
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[torch.Tensor]:
        # DistributedSampler.__iter__, in tensors: shuffle by seed + epoch, pad by repeating
        # (or drop) to a multiple of the number of processes, then every num_replicas-th index.
        n = len(self.dataset)  # type: ignore[arg-type]
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            # int32 where it fits: the same permutation as DistributedSampler's int64 one (the
            # same random draws) in half the memory, so faster for millions of examples
            indices = torch.randperm(n, generator=generator, dtype=index_dtype(n))
        else:
            indices = torch.arange(n, dtype=index_dtype(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            indices = indices.repeat(math.ceil(self.total_size / n))[:self.total_size]
        mine = indices[self.rank:self.total_size:self.num_replicas]
        full = len(mine) // self.batch_size * self.batch_size  # drop_last for the batches
        return iter(mine[:full].split(self.batch_size) if full else ())

    def __len__(self) -> int:
        return self.num_samples // self.batch_size
