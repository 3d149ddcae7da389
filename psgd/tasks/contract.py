"""The dataset contract, checked once where the data is first built.

A dataset callable returns `(train, test)`; each split is `(x, y)` tensors of
equal length, a `TensorDataset` of two tensors, or a map-style `Dataset` whose
items are `(x, y)` pairs (kept as it is and read through a DataLoader: it
need not fit in memory; its first item is checked). x is a float tensor (never a numpy array: psgd
does not guess dtypes); y holds integer class labels for classification, or
float targets when the task says `objective: regression`. A mistake is a
`DatasetContractError` naming the split and what is wrong, never a silent
conversion (float labels do not quietly turn a classifier into a regression).
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["DatasetContractError", "OBJECTIVES", "is_tensor_pair", "split_tensors", "check_targets",
           "check_items", "resolve_objective"]

OBJECTIVES = ("classification", "regression")


class DatasetContractError(ValueError):
    """A dataset does not follow the (train, test) of (x, y) contract."""


def resolve_objective(configured: str, builtin: str | None) -> str:
    """`task.objective` (auto | classification | regression) for a dataset: auto is
    the built-in dataset's own objective, and classification for a user's dataset."""
    if configured != "auto":
        return configured
    return builtin or "classification"


def _describe(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__name__}" if kind.__module__ != "builtins" else kind.__name__


def _require_tensor(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    hint = " (convert it with torch.from_numpy)" if type(value).__module__.startswith("numpy") else ""
    raise DatasetContractError(f"{what} must be a torch.Tensor, got {_describe(value)}{hint}")


def is_tensor_pair(ds: Any) -> bool:
    """(x, y) given as two tensors or a TensorDataset: materialised and indexed directly."""
    return (isinstance(ds, (tuple, list)) and len(ds) == 2) or isinstance(getattr(ds, "tensors", None), tuple)


def check_items(split: str, ds: Any, objective: str) -> torch.Tensor:
    """Checks a map-style Dataset kept as it is: a length, and a first item that
    follows the contract. Returns the first x (its shape is the input shape)."""
    if isinstance(ds, torch.utils.data.IterableDataset):
        raise DatasetContractError(f"{split}: an IterableDataset has no length to split between workers; "
                                   "return a map-style Dataset or (x, y) tensors")
    if not (hasattr(ds, "__getitem__") and hasattr(ds, "__len__")):
        raise DatasetContractError(f"{split} must be (x, y) tensors or a torch Dataset of (x, y) pairs, "
                                   f"got {_describe(ds)}")
    if len(ds) == 0:
        raise DatasetContractError(f"{split} is empty")
    item = ds[0]
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise DatasetContractError(f"{split}[0] must be an (x, y) pair, got {_describe(item)}")
    x, y = item
    x = _require_tensor(x, f"{split}[0] x")
    if isinstance(y, (bool, int, float)) and not isinstance(y, bool):
        y = torch.tensor(y)
    y = _require_tensor(y, f"{split}[0] y")
    check_targets(f"{split}[0]", y.reshape(-1)[:1], objective)
    return x


def split_tensors(split: str, ds: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The (x, y) tensors of one split, materialised. Raises DatasetContractError."""
    if isinstance(ds, torch.utils.data.IterableDataset):
        raise DatasetContractError(f"{split}: an IterableDataset has no length to split between workers; "
                                   "return a map-style Dataset or (x, y) tensors")
    if isinstance(ds, (tuple, list)) and len(ds) == 2:
        x, y = (_require_tensor(t, f"{split} {name}") for t, name in zip(ds, ("x", "y")))
    elif isinstance(getattr(ds, "tensors", None), tuple):  # TensorDataset
        if len(ds.tensors) != 2:
            raise DatasetContractError(f"{split}: a TensorDataset of (x, y) has 2 tensors, this one {len(ds.tensors)}")
        x, y = ds.tensors
    elif hasattr(ds, "__getitem__") and hasattr(ds, "__len__"):
        x, y = _stack_items(split, ds)
    else:
        raise DatasetContractError(f"{split} must be (x, y) tensors or a torch Dataset of (x, y) pairs, "
                                   f"got {_describe(ds)}")
    if x.dim() == 0 or y.dim() == 0:
        raise DatasetContractError(f"{split}: x and y need a first (example) dimension")
    if len(x) != len(y):
        raise DatasetContractError(f"{split}: x has {len(x)} examples but y has {len(y)}")
    if len(x) == 0:
        raise DatasetContractError(f"{split} is empty")
    if not (x.is_floating_point() or x.dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)):
        raise DatasetContractError(f"{split} x has dtype {x.dtype}; expected a real-valued tensor")
    return x, y


def _stack_items(split: str, ds) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(ds)
    if n == 0:
        raise DatasetContractError(f"{split} is empty")
    xs, ys = [], []
    for i in range(n):
        item = ds[i]
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise DatasetContractError(f"{split}[{i}] must be an (x, y) pair, got {_describe(item)}")
        x, y = item
        xs.append(_require_tensor(x, f"{split}[{i}] x"))
        if isinstance(y, torch.Tensor):
            ys.append(y)
        elif isinstance(y, (bool, int, float)):
            ys.append(torch.tensor(y))
        else:
            raise DatasetContractError(f"{split}[{i}] y must be a tensor or a Python number, got {_describe(y)}")
    try:
        return torch.stack(xs), torch.stack(ys)
    except RuntimeError as exc:
        raise DatasetContractError(f"{split}: items have different shapes ({exc})") from None


def check_targets(split: str, y: torch.Tensor, objective: str) -> None:
    """Integer labels for classification, float targets for regression."""
    if objective == "classification":
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise DatasetContractError(
                f"{split} y has dtype {y.dtype} but the task is classification, which needs integer class "
                "labels: cast them with .long(), or set task.objective: regression for float targets")
        if y.dim() != 1:
            raise DatasetContractError(f"{split} y must hold one class label per example, got shape {tuple(y.shape)}")
        if int(y.min()) < 0:
            raise DatasetContractError(f"{split} y has negative class label {int(y.min())}")
    elif not y.is_floating_point():
        raise DatasetContractError(f"{split} y has dtype {y.dtype} but the task is regression, which needs "
                                   "float targets: cast them with .float(), or set task.objective: classification")
