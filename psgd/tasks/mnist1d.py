"""MNIST-1D (Greydanus & Steinbach): ten 1-D digit templates, padded, shifted,
sheared, scaled and noised into 40-sample signals, generated procedurally by
the `mnist1d` package (no download). Its paper reports test accuracy of about
94% for a small CNN, 68% for an MLP and 32% for logistic regression, so it
separates models and optimisers where 8x8 digits saturate at once.

Generating the default 5,000 signals takes seconds to tens of seconds of
scipy interpolation, and every worker and the evaluator load the task, so the
arrays are cached once per argument set (an .npz keyed by the arguments) in
`cache_dir`, $PSGD_CACHE_DIR or ~/.cache/psgd. Writes are atomic, so
processes starting together never read a half-written cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch import nn

from psgd.runtime.files import atomic_write

__all__ = ["mnist1d_dataset", "CNN1D", "cache_path", "default_cache_dir"]


def default_cache_dir() -> Path:
    """Where generated datasets are kept: $PSGD_CACHE_DIR, else ~/.cache/psgd."""
    return Path(os.environ.get("PSGD_CACHE_DIR") or Path.home() / ".cache" / "psgd")


def cache_path(args: dict, cache_dir: Optional[str] = None) -> Path:
    key = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
    return (Path(cache_dir) if cache_dir else default_cache_dir()) / f"mnist1d-{key}.npz"


def _generate(args: dict) -> dict:
    from mnist1d.data import get_dataset_args, make_dataset
    from mnist1d.utils import ObjectView
    full = get_dataset_args(as_dict=True)
    full.update(args)
    # make_dataset seeds numpy's and random's global generators: put them back.
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        data = make_dataset(ObjectView(full))
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return {k: np.asarray(data[k]) for k in ("x", "y", "x_test", "y_test")}


def mnist1d_dataset(num_samples: int = 5000, seed: int = 42, train_split: float = 0.8,
                    cache_dir: Optional[str] = None, **_):
    """((x_train, y_train), (x_test, y_test)) as tensors; x is (N, 40) float32."""
    if num_samples < 10:
        raise ValueError(f"mnist1d: num_samples must be >= 10, got {num_samples}")
    if not 0 < train_split < 1:
        raise ValueError(f"mnist1d: train_split must be in (0, 1), got {train_split}")
    args = {"num_samples": int(num_samples), "seed": int(seed), "train_split": float(train_split)}
    path = cache_path(args, cache_dir)
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in ("x", "y", "x_test", "y_test")}
    except (FileNotFoundError, OSError, KeyError, ValueError):
        arrays = _generate(args)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda f: np.savez(f, **arrays), fsync=False)

    def t(x, y):
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.int64)
    return t(arrays["x"], arrays["y"]), t(arrays["x_test"], arrays["y_test"])


class CNN1D(nn.Module):
    """Three strided 1-D convolutions and a linear head (the shape of the CNN
    in the MNIST-1D paper; `channels` sets its width and cost)."""

    def __init__(self, in_features: int, num_outputs: int, channels: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, channels, 5, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
        )
        with torch.no_grad():
            width = self.features(torch.zeros(1, 1, in_features)).numel()
        self.head = nn.Linear(width, num_outputs)

    def forward(self, x):
        return self.head(self.features(x.reshape(len(x), 1, -1)).flatten(1))
