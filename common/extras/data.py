"""Training data beyond the tutorial's five examples: the one batch-size rule, and noisy copies
where there are too few examples for the processes."""

from __future__ import annotations

import argparse
import math

import torch
import torch.distributed as dist


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


def enlarge_for_processes(X: torch.Tensor, y: torch.Tensor, world_size: int,
                          args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """a08's training data: --num-samples examples if given (checked to go round), else the
    examples, with noisy copies where some process would get no full batch (rank 0 says so)."""
    num_samples = args.num_samples or len(y)
    if not gives_full_batches(num_samples, world_size, args.batch_size):
        num_samples = samples_needed(world_size, args.batch_size)
        if dist.get_rank() == 0:
            print(f"Note: {len(y)} examples leave some of the {world_size} processes without "
                  f"a full batch of {args.batch_size}; training on {num_samples} (the examples "
                  f"plus noisy copies; see --num-samples).")
    return with_noisy_copies(X, y, num_samples, args.seed)


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
