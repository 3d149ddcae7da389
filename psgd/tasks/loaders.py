"""Feeding a task's data through torch DataLoaders.

A worker reads its own disjoint share of the train split in the order
`worker_batches` gives (reshuffled every epoch from the seed), through a
DataLoader so that a map-style Dataset which loads examples on access can use
loader processes (`workers.loader.num_workers`) and pinned batches
(`workers.loader.pin_memory`, on CUDA). Data that is already a pair of tensors
is fetched a whole batch at a time (one indexing op, no per-example collate).
"""
from __future__ import annotations

from typing import Iterator, Optional

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["TensorPairs", "ShareBatchSampler", "worker_batches", "train_loader", "eval_batches"]


class TensorPairs(Dataset):
    """(x, y) tensors as a Dataset whose batches are fetched with one index op."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __getitems__(self, indices: list[int]):  # DataLoader's batched fetch (torch >= 2.1)
        idx = torch.as_tensor(indices)
        return self.x[idx], self.y[idx]


def _as_batch(batch):
    return batch  # TensorPairs.__getitems__ already returns (x, y) batches


def _loader(dataset: Dataset, num_workers: int, pin_memory: bool, **kw) -> DataLoader:
    batched = isinstance(dataset, TensorPairs)
    if batched and num_workers == 0:
        kw["collate_fn"] = _as_batch
    elif batched:
        dataset = _Unbatched(dataset)  # loader processes collate per example as usual
    return DataLoader(dataset, num_workers=num_workers, pin_memory=pin_memory,
                      persistent_workers=num_workers > 0, **kw)


class _Unbatched(Dataset):
    def __init__(self, pairs: TensorPairs):
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]


def worker_batches(n: int, rank: int, workers: int, batch_size: int, seed: int) -> Iterator[torch.Tensor]:
    """Endless index batches for `rank`: a disjoint 1/workers share of [0, n),
    reshuffled every epoch from (seed, rank, epoch). Incomplete batches are
    dropped so every step averages exactly batch_size examples. A share
    smaller than the batch (many workers, little data) wraps around: its
    epochs run on into each other, so a batch holds every example of the
    share at least once and some twice or more."""
    share = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[rank::workers]
    if not len(share):
        raise ValueError(f"worker {rank} has no examples: {n} examples for {workers} workers")
    epochs = _epochs(share, seed, rank)
    if len(share) >= batch_size:
        for order in epochs:
            for i in range(0, len(order) - batch_size + 1, batch_size):
                yield order[i:i + batch_size]
    left = torch.empty(0, dtype=share.dtype)
    per_cat = -(-4 * batch_size // len(share))  # epochs joined at a time: one cat per ~4 batches
    while True:  # wrap-around
        stream = torch.cat([left] + [next(epochs) for _ in range(per_cat)])
        whole = len(stream) // batch_size * batch_size
        yield from stream[:whole].view(-1, batch_size)
        left = stream[whole:]


def _epochs(share: torch.Tensor, seed: int, rank: int) -> Iterator[torch.Tensor]:
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 7919 + epoch)
        yield share[torch.randperm(len(share), generator=g)]
        epoch += 1


class ShareBatchSampler(Sampler):
    """Endless index batches of one worker's share (see worker_batches)."""

    def __init__(self, n: int, rank: int, workers: int, batch_size: int, seed: int):
        self._batches = worker_batches(n, rank, workers, batch_size, seed)  # validates the share size

    def __iter__(self) -> Iterator[list[int]]:
        for idx in self._batches:
            yield idx.tolist()


def train_loader(dataset: Dataset, rank: int, workers: int, batch_size: int, seed: int,
                 num_workers: int = 0, pin_memory: bool = False) -> Iterator:
    """Endless (x, y) batches of `rank`'s share of `dataset`."""
    sampler = ShareBatchSampler(len(dataset), rank, workers, batch_size, seed)
    if isinstance(dataset, TensorPairs) and num_workers == 0 and not pin_memory:
        return _indexed(dataset, sampler)
    return iter(_loader(dataset, num_workers, pin_memory, batch_sampler=sampler))


def _indexed(pairs: TensorPairs, sampler: ShareBatchSampler) -> Iterator:
    """The batches a DataLoader would give, indexed directly: for a small model the
    DataLoader's per-batch Python costs a sizeable part of a step. Its iterator
    draws one seed from the global generator; so does this, to leave it as it would."""
    torch.empty((), dtype=torch.int64).random_()  # now, as DataLoader's iter() does
    x, y = pairs.x, pairs.y
    return ((x[idx], y[idx]) for idx in sampler._batches)


def eval_batches(dataset: Dataset, batch_size: int, limit: Optional[int] = None) -> Iterator:
    """(x, y) batches of `dataset` in order (the first `limit` examples, when given)."""
    if limit is not None:
        dataset = torch.utils.data.Subset(dataset, range(min(limit, len(dataset)))) \
            if not isinstance(dataset, TensorPairs) else TensorPairs(dataset.x[:limit], dataset.y[:limit])
    return iter(_loader(dataset, 0, False, batch_size=batch_size))
