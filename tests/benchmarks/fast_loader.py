"""The benchmark's loader (not a08's): the batches of the tutorial's ``DataLoader(dataset,
batch_size, shuffle=False, drop_last=True, sampler=DistributedSampler(dataset))``, the same ones
in the same order, each fetched by one ``index_select``. The tutorial's loader turns every index
into a Python int, fetches each example alone and stacks them, which costs more than the
model's own forward and backward pass at large batch sizes: the benchmark measures DDP, not
that. tests/test_common.py checks the batches against the tutorial's loader."""

import math
from collections.abc import Iterator

from common import ToyDataset

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def fast_batch_loader(dataset: ToyDataset, batch_size: int) -> DataLoader:
    """The tutorial's DistributedSampler batches of ``dataset``, one index_select each."""
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
