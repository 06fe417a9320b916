"""Pieces of common/ that the scripts' output cannot pin down on its own."""

import sys

from common import ToyDataset, compute_accuracy
from common.extras.devices import gpu_shortage

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
from fast_loader import (
    BatchGatheringDataset,
    DistributedBatchSampler,
    fast_batch_loader,
    index_dtype,
)


@pytest.mark.parametrize("num_samples, replicas, batch", [
    (5, 1, 2), (5, 2, 2), (5, 3, 2), (10, 5, 2), (16, 8, 2), (1000, 3, 64), (97, 4, 5),
])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_sampler_gives_the_tutorials_batches(num_samples, replicas, batch, drop_last):
    dataset = ToyDataset(torch.arange(num_samples * 2.0).reshape(-1, 2),
                         torch.arange(num_samples))
    for rank in range(replicas):
        reference = DataLoader(dataset, batch_size=batch, drop_last=True, sampler=(
            DistributedSampler(dataset, replicas, rank, drop_last=drop_last, seed=7)))
        ours = DataLoader(BatchGatheringDataset(dataset.features, dataset.labels),
                          batch_size=None, sampler=DistributedBatchSampler(
                              dataset, batch, num_replicas=replicas, rank=rank,
                              drop_last=drop_last, seed=7))
        for epoch in (0, 1, 5):
            reference.sampler.set_epoch(epoch)
            ours.sampler.set_epoch(epoch)
            expected = [(features.tolist(), labels.tolist()) for features, labels in reference]
            assert [(features.tolist(), labels.tolist()) for features, labels in ours] == expected
            assert len(ours) == len(expected)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_a_batch_of_indices_fetches_the_same_rows_as_one_by_one(dtype):
    dataset = BatchGatheringDataset(torch.randn(1000, 2), torch.randint(0, 2, (1000,)))
    indices = torch.randperm(1000, dtype=dtype)[:300]
    features, labels = dataset[indices]
    assert torch.equal(features, torch.stack([dataset[int(i)][0] for i in indices]))
    assert torch.equal(labels, torch.stack([dataset[int(i)][1] for i in indices]))


def test_a_boolean_mask_still_selects_as_plain_indexing_does():
    dataset = BatchGatheringDataset(torch.randn(10, 2), torch.arange(10))
    mask = torch.arange(10) % 3 == 0
    features, labels = dataset[mask]
    assert torch.equal(features, dataset.features[mask])
    assert labels.tolist() == [0, 3, 6, 9]


def test_index_dtype_switches_to_int64_past_int32():
    assert index_dtype(5) == torch.int32
    assert index_dtype(2**31 - 1) == torch.int32
    assert index_dtype(2**31) == torch.int64


def test_fast_batch_loader_gives_the_tutorials_loader_batches():
    """The benchmark's loader against a08's own, in a process group of one."""
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        dataset = ToyDataset(torch.arange(22.0).reshape(-1, 2), torch.arange(11))
        reference = DataLoader(dataset, batch_size=3, shuffle=False, drop_last=True,
                               sampler=DistributedSampler(dataset))
        fast = fast_batch_loader(dataset, 3)
        for epoch in (0, 1):
            reference.sampler.set_epoch(epoch)
            fast.sampler.set_epoch(epoch)
            expected = [(f.tolist(), y.tolist()) for f, y in reference]
            assert [(f.tolist(), y.tolist()) for f, y in fast] == expected
            assert len(expected) == 3
    finally:
        dist.destroy_process_group()


def test_gpu_shortage_names_the_fix():
    assert gpu_shortage(2, 2, "Linux") is None
    assert gpu_shortage(8, 2, "Linux") == (
        "8 processes on this machine but only 2 GPU(s), and NCCL refuses two processes on one "
        "GPU; start 2 (--nproc_per_node=2 or --spawn 2), or use --device cpu")
    assert "no usable CUDA GPU" in gpu_shortage(1, 0, "Linux")


def test_compute_accuracy_scores_each_example_by_its_own_logits():
    """Section 7's compute_accuracy: the argmax over each example's classes (dim=1), counted
    over every batch. Fixed logits, so that a wrong axis or count gives another figure."""
    logits = torch.tensor([[2.0, 1.0], [3.0, 0.0], [0.0, 1.0], [5.0, 4.0], [1.0, 2.0]])
    labels = torch.tensor([0, 0, 1, 1, 1])  # all but the fourth predicted right
    dataset = ToyDataset(torch.arange(5), labels)
    model = torch.nn.Module()
    model.forward = lambda index: logits[index]
    assert compute_accuracy(model, DataLoader(dataset, batch_size=2)) == pytest.approx(0.8)
