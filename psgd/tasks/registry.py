"""Tasks: a model, its train/test data, the loss and the accuracy metric.

Built-in datasets (tasks/datasets.py) need no download. Users plug in their own with "module.path:callable"; a module
next to the config file is importable, and `psgd.launch` passes objects as
"object:PATH" (tasks/objects.py). Every dataset is checked against the
contract in tasks/contract.py and materialised as tensors once, so batching is
indexing. Processes of a launched run read the splits the launcher already
built (tasks/cache.py) and only the ones they need.
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import torch
from torch import nn
from torch.utils.data import Dataset

from psgd.config import Config
from psgd.config.task_sources import BUILTIN_DATASET_NAMES, BUILTIN_MODEL_NAMES
from psgd.tasks.cache import TaskShape, load_shape, load_split
from psgd.tasks.contract import (
    DatasetContractError,
    check_items,
    check_targets,
    is_tensor_pair,
    resolve_objective,
    split_tensors,
)
from psgd.tasks.datasets import BUILTIN_DATASETS
from psgd.tasks.loaders import TensorPairs, eval_batches
from psgd.tasks.objects import is_object_spec, load_object

__all__ = ["Task", "TaskShape", "load_task", "task_shape", "build_model", "resolve_callable"]

@dataclass
class Task:
    """The splits a process loaded and the model's shape. Tensor data fills
    x_*/y_*; a map-style Dataset is kept as `*_set` and read through a
    DataLoader. A split the process did not ask for is None."""
    x_train: Optional[torch.Tensor]
    y_train: Optional[torch.Tensor]
    x_test: Optional[torch.Tensor]
    y_test: Optional[torch.Tensor]
    shape: TaskShape
    train_set: Optional[Dataset] = None
    test_set: Optional[Dataset] = None

    @property
    def regression(self) -> bool:
        return self.shape.regression

    @property
    def lazy(self) -> bool:
        """True when the data is a Dataset read on access rather than tensors in memory."""
        return self.train_set is not None or self.test_set is not None

    def train_data(self) -> Dataset:
        return self.train_set if self.train_set is not None else TensorPairs(self.x_train, self.y_train)

    def test_data(self) -> Dataset:
        return self.test_set if self.test_set is not None else TensorPairs(self.x_test, self.y_test)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.regression:
            return nn.functional.mse_loss(out.reshape(y.shape), y)
        return nn.functional.cross_entropy(out, y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu", chunk: int = 2048) -> tuple[float, float]:
        """(accuracy, mean loss) on the test set. For regression, accuracy is the
        fraction of predictions within 0.1 of the target; for sequence targets
        (a language model's next characters) it is per element."""
        model.eval()
        total_loss, correct, n, labels = 0.0, 0, 0, 0
        for x, y in eval_batches(self.test_data(), chunk):
            x, y = self.inputs(x).to(device), self.targets(y).to(device)
            n += len(y)
            labels += y.numel()  # one per example, or one per position of a sequence
            out = model(x)
            total_loss += float(self.loss(out, y)) * len(y)
            if self.regression:
                correct += int(((out.reshape(y.shape) - y).abs() < 0.1).sum())
            else:
                correct += int((out.argmax(dim=1) == y).sum())
        model.train()
        return correct / max(labels, 1), total_loss / max(n, 1)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        return x.float()

    def targets(self, y: torch.Tensor) -> torch.Tensor:
        return y.float() if self.regression else y.long()


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


SPLITS = ("train", "test")


def _dataset_callable(cfg: Config):
    spec = cfg.task.dataset
    if spec in BUILTIN_DATASETS:
        return BUILTIN_DATASETS[spec].load
    if is_object_spec(spec):
        obj = load_object(spec)
        return obj if callable(obj) else (lambda **_: obj)  # the (train, test) pair itself
    return resolve_callable(spec, cfg.base_dir)


def build_splits(cfg: Config) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor], TaskShape]:
    """Calls the dataset, checks it against the contract and returns the
    (x, y) of train and test with the model's shape. Raises DatasetContractError."""
    spec = cfg.task.dataset
    result = _dataset_callable(cfg)(**cfg.task.dataset_args)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise DatasetContractError(f"dataset {spec!r} must return (train, test), got {type(result).__name__}")
    builtin = BUILTIN_DATASETS.get(spec)
    objective = resolve_objective(cfg.task.objective, builtin.objective if builtin else None)
    regression = objective == "regression"
    if not all(is_tensor_pair(ds) for ds in result):
        # Map-style Datasets stay as they are: checked on their first item, read on access.
        firsts = [check_items(name, ds, objective) for name, ds in zip(SPLITS, result)]
        if firsts[0].shape != firsts[1].shape:
            raise DatasetContractError(f"train examples have shape {tuple(firsts[0].shape)} but test examples "
                                       f"{tuple(firsts[1].shape)}")
        # The number of classes is unknown without reading every label: only the user's own model can say.
        return result[0], result[1], TaskShape(firsts[0].numel(), 1 if regression else 0, regression)
    splits = []
    for name, ds in zip(SPLITS, result):
        x, y = split_tensors(name, ds)
        check_targets(name, y, objective)
        splits.append((x.float(), y.float() if regression else y.long()))
    (xtr, ytr), (xte, yte) = splits
    if xtr.shape[1:] != xte.shape[1:]:
        raise DatasetContractError(f"train examples have shape {tuple(xtr.shape[1:])} but test examples "
                                   f"{tuple(xte.shape[1:])}")
    outputs = 1 if regression else int(max(ytr.max(), yte.max())) + 1
    return splits[0], splits[1], TaskShape(xtr[0].numel(), outputs, regression)


def load_task(cfg: Config, run_dir: Optional[Union[str, Path]] = None,
              splits: Sequence[str] = SPLITS) -> Task:
    """The task with the `splits` asked for. In a launched run (`run_dir` with the
    launcher's task cache) those splits are read from it; otherwise the
    dataset is built here."""
    shape = load_shape(run_dir)
    cached = {name: load_split(run_dir, name) for name in splits} if shape is not None else {}
    if shape is None or any(v is None for v in cached.values()):
        train, test, shape = build_splits(cfg)
        cached = {k: v for k, v in (("train", train), ("test", test)) if k in splits}
    sets = {k: v for k, v in cached.items() if not isinstance(v, tuple)}
    (xtr, ytr) = cached.get("train") if "train" in cached and "train" not in sets else (None, None)
    (xte, yte) = cached.get("test") if "test" in cached and "test" not in sets else (None, None)
    return Task(xtr, ytr, xte, yte, shape, sets.get("train"), sets.get("test"))


def task_shape(cfg: Config, run_dir: Optional[Union[str, Path]] = None) -> TaskShape:
    """The model's input/output shape without building the data where possible:
    from the run's task cache, or a built-in dataset's known shape."""
    shape = load_shape(run_dir)
    if shape is not None:
        return shape
    builtin = BUILTIN_DATASETS.get(cfg.task.dataset)
    if builtin is not None and builtin.shape is not None and cfg.task.objective in ("auto", builtin.objective):
        return builtin.shape(**cfg.task.dataset_args)
    return build_splits(cfg)[2]


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


def _cnn1d(in_features: int, num_outputs: int, **kwargs):
    from psgd.tasks.mnist1d import CNN1D
    return CNN1D(in_features, num_outputs, **kwargs)


def _char_transformer(in_features: int, num_outputs: int, **kwargs):
    from psgd.tasks.charlm import CharTransformer
    return CharTransformer(in_features, num_outputs, **kwargs)


BUILTIN_MODELS = {"mlp": MLP, "cnn": SmallCNN, "linear": _linear, "cnn1d": _cnn1d,
                  "char_transformer": _char_transformer}
# The config refuses other names before torch loads (psgd/config/task_sources.py): the two lists are one.
if tuple(BUILTIN_MODELS) != BUILTIN_MODEL_NAMES or tuple(BUILTIN_DATASETS) != BUILTIN_DATASET_NAMES:
    raise ImportError(f"psgd.tasks builds models {tuple(BUILTIN_MODELS)} and datasets {tuple(BUILTIN_DATASETS)}, "
                      f"but the config accepts {BUILTIN_MODEL_NAMES} and {BUILTIN_DATASET_NAMES}")


# Seeding and building share torch's global generator: shards, clients and tests
# that build models on several threads of one process take turns.
_BUILD_LOCK = threading.Lock()


def needs_shape(cfg: Config) -> bool:
    """Built-in models are sized from the data; a user's model sizes itself."""
    return cfg.task.model in BUILTIN_MODELS


def build_model(cfg: Config, task: Union[Task, TaskShape, None]) -> nn.Module:
    """The model with the run's initial parameters (seeded: identical in every process and thread).
    `task` may be None for a user's own model (see needs_shape)."""
    with _BUILD_LOCK:
        return _build_model(cfg, task)


def _build_model(cfg: Config, task: Union[Task, TaskShape, None]) -> nn.Module:
    torch.manual_seed(cfg.run.seed)
    spec = cfg.task.model
    shape = task.shape if isinstance(task, Task) else task
    if shape is None and needs_shape(cfg):
        raise ValueError(f"the built-in model {spec!r} is sized from the data: pass the task or its shape")
    if spec in BUILTIN_MODELS:
        if shape.num_outputs < 1:
            raise ValueError(f"the built-in model {spec!r} needs the number of classes, which a Dataset read on "
                             "access does not tell: use your own model (task.model: module:callable)")
        model = BUILTIN_MODELS[spec](shape.in_features, shape.num_outputs, **cfg.task.model_args)
    elif is_object_spec(spec):
        obj = load_object(spec)  # a module (its own parameters) or a callable making one
        model = obj if isinstance(obj, nn.Module) else obj(**cfg.task.model_args)
    else:
        model = resolve_callable(spec, cfg.base_dir)(**cfg.task.model_args)
        if not isinstance(model, nn.Module):
            raise ValueError(f"model {spec!r} must return a torch.nn.Module, got {type(model).__name__}")
    return model

