"""The task as the launching process built it, kept in the run directory for the children.

Pre-flight builds the dataset once and writes each split as a tensor file
(RUN_DIR/task/train.pt, test.pt) plus the shape of the model's input and
output (task.json). Children then never import or call the dataset code:
workers map only the train split, the evaluator only the test split, and
servers read only task.json to build the model. Splits are loaded memory-mapped
(`mmap=True`), so the processes of one machine share one copy in the page cache.
"""
from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import torch

from psgd.runtime.files import atomic_write

__all__ = ["TaskShape", "CACHE_DIR", "save_task_cache", "load_split", "load_shape"]

CACHE_DIR = "task"


@dataclass(frozen=True)
class TaskShape:
    in_features: int     # numel of one input example
    num_outputs: int     # classes, or 1 for regression
    regression: bool


def _atomic_save(obj, path: Path) -> None:
    """torch.save into memory, then an ordinary write: a full disk is an OSError naming
    the file (torch.save writing a file itself raises a RuntimeError that names neither)."""
    data = io.BytesIO()
    torch.save(obj, data)
    atomic_write(path, data.getbuffer(), fsync=False)


def save_task_cache(run_dir: Path, train: tuple[torch.Tensor, torch.Tensor],
                    test: tuple[torch.Tensor, torch.Tensor], shape: TaskShape) -> None:
    folder = Path(run_dir) / CACHE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name, (x, y) in (("train", train), ("test", test)):
        _atomic_save({"x": x.contiguous(), "y": y.contiguous()}, folder / f"{name}.pt")
    atomic_write(folder / "task.json", json.dumps(asdict(shape)), fsync=False)


def load_split(run_dir: Optional[Path], split: str) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) of `split` from the run directory's cache, or None when there is none."""
    if run_dir is None:
        return None
    path = Path(run_dir) / CACHE_DIR / f"{split}.pt"
    if not path.is_file():
        return None
    data = torch.load(path, weights_only=True, mmap=True)
    return data["x"], data["y"]


def load_shape(run_dir: Optional[Path]) -> Optional[TaskShape]:
    if run_dir is None:
        return None
    path = Path(run_dir) / CACHE_DIR / "task.json"
    if not path.is_file():
        return None
    return TaskShape(**json.loads(path.read_text()))
