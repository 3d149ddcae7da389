"""Tasks: a model, its train/test data, the loss and the accuracy metric.

Built-in datasets need no download: `digits` is the 8x8 handwritten digits
set shipped inside scikit-learn; `synthetic` is linear regression with a
known optimum. Users plug in their own with "module.path:callable"; a module
next to the config file is importable. Datasets are materialised as tensors
once, so batching is indexing.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch import nn

from psgd.config import Config

__all__ = ["Task", "load_task", "build_model", "worker_batches", "resolve_callable"]

DATA_SPLIT_SEED = 1234  # fixed, so every run and mode sees the same test set


@dataclass
class Task:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def regression(self) -> bool:
        return self.y_train.is_floating_point()

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.regression:
            return nn.functional.mse_loss(out.reshape(y.shape), y)
        return nn.functional.cross_entropy(out, y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu", chunk: int = 2048) -> tuple[float, float]:
        """(accuracy, mean loss) on the test set. For regression, accuracy is the
        fraction of predictions within 0.1 of the target."""
        model.eval()
        total_loss, correct, n = 0.0, 0, len(self.y_test)
        for i in range(0, n, chunk):
            x = self.x_test[i:i + chunk].to(device)
            y = self.y_test[i:i + chunk].to(device)
            out = model(x)
            total_loss += float(self.loss(out, y)) * len(y)
            if self.regression:
                correct += int(((out.reshape(y.shape) - y).abs() < 0.1).sum())
            else:
                correct += int((out.argmax(dim=1) == y).sum())
        model.train()
        return correct / max(n, 1), total_loss / max(n, 1)


def resolve_callable(spec: str, base_dir: str) -> Callable:
    """'package.module:name' -> the object; base_dir is put on sys.path first."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected 'module.path:callable', got {spec!r}")
    if base_dir and base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # the working directory too, after installed packages
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} for {spec!r}: {exc}") from None
    obj = getattr(module, attr, None)
    if not callable(obj):
        raise ValueError(f"{spec!r}: {module_name} has no callable {attr!r}")
    return obj


def _digits(**_):
    from sklearn.datasets import load_digits  # ships its data inside the package
    bunch = load_digits()
    x = torch.tensor(bunch.data, dtype=torch.float32) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.int64)
    return _split(x, y, test_fraction=0.2)


def _synthetic(dim: int = 10, n_train: int = 1024, n_test: int = 256, noise: float = 0.0, **_):
    g = torch.Generator().manual_seed(DATA_SPLIT_SEED)
    w = torch.randn(dim, generator=g)
    x = torch.randn(n_train + n_test, dim, generator=g)
    y = x @ w + 0.5 + noise * torch.randn(n_train + n_test, generator=g)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def _split(x, y, test_fraction):
    g = torch.Generator().manual_seed(DATA_SPLIT_SEED)
    perm = torch.randperm(len(y), generator=g)
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return (x[train], y[train]), (x[test], y[test])


BUILTIN_DATASETS = {"digits": _digits, "synthetic": _synthetic}


def _as_tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(ds, tuple) and len(ds) == 2 and all(isinstance(t, torch.Tensor) for t in ds):
        return ds
    tensors = getattr(ds, "tensors", None)  # TensorDataset
    if tensors is not None and len(tensors) == 2:
        return tensors[0], tensors[1]
    items = [ds[i] for i in range(len(ds))]
    x = torch.stack([torch.as_tensor(it[0]) for it in items])
    y = torch.as_tensor([it[1] for it in items]) if not torch.is_tensor(items[0][1]) else torch.stack([it[1] for it in items])
    return x, y


def load_task(cfg: Config) -> Task:
    spec = cfg.task.dataset
    fn = BUILTIN_DATASETS.get(spec) or resolve_callable(spec, cfg.base_dir)
    result = fn(**cfg.task.dataset_args)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise ValueError(f"dataset {spec!r} must return (train, test), got {type(result).__name__}")
    (xtr, ytr), (xte, yte) = (_as_tensors(d) for d in result)
    xtr, xte = xtr.float(), xte.float()
    if ytr.is_floating_point():
        ytr, yte = ytr.float(), yte.float()
    return Task(xtr, ytr, xte, yte)


class MLP(nn.Module):
    def __init__(self, in_features: int, num_outputs: int, hidden: int = 64, depth: int = 1):
        super().__init__()
        layers, width = [], in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, num_outputs))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x.flatten(1))


class SmallCNN(nn.Module):
    """Two 3x3 convolutions and a linear head, for small square images."""

    def __init__(self, in_features: int, num_outputs: int, channels: int = 16, side: int = 0):
        super().__init__()
        self.side = side or int(round(in_features ** 0.5))
        if self.side * self.side != in_features:
            raise ValueError(f"cnn needs square single-channel inputs, got {in_features} features")
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * channels * (self.side // 2) ** 2, num_outputs)

    def forward(self, x):
        x = x.reshape(-1, 1, self.side, self.side)
        return self.head(self.features(x).flatten(1))


def _linear(in_features: int, num_outputs: int, **_):
    return nn.Linear(in_features, num_outputs)


BUILTIN_MODELS = {"mlp": MLP, "cnn": SmallCNN, "linear": _linear}


def build_model(cfg: Config, task: Task) -> nn.Module:
    """The model with the run's initial parameters (seeded: identical in every process)."""
    torch.manual_seed(cfg.run.seed)
    spec = cfg.task.model
    if spec in BUILTIN_MODELS:
        in_features = task.x_train[0].numel()
        outputs = 1 if task.regression else int(task.y_train.max()) + 1
        model = BUILTIN_MODELS[spec](in_features, outputs, **cfg.task.model_args)
    else:
        model = resolve_callable(spec, cfg.base_dir)(**cfg.task.model_args)
        if not isinstance(model, nn.Module):
            raise ValueError(f"model {spec!r} must return a torch.nn.Module, got {type(model).__name__}")
    return model


def worker_batches(n: int, rank: int, workers: int, batch_size: int, seed: int) -> Iterator[torch.Tensor]:
    """Endless index batches for `rank`: a disjoint 1/workers share of [0, n),
    reshuffled every epoch from (seed, rank, epoch). Incomplete batches are
    dropped so every step averages exactly batch_size examples."""
    share = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[rank::workers]
    if len(share) < batch_size:
        raise ValueError(f"worker {rank} has {len(share)} examples, fewer than batch_size {batch_size}")
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 7919 + epoch)
        order = share[torch.randperm(len(share), generator=g)]
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield order[i:i + batch_size]
        epoch += 1
