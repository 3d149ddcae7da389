"""The digits dataset is read from the file scikit-learn ships, without importing sklearn
(its import, through scipy, cost seconds of every quickstart launch), and equals what
sklearn's own loader gives, bit for bit."""
import sys

import pytest
import torch

from psgd.tasks.datasets import BUILTIN_DATASETS, _split


def _sklearn_modules() -> list[str]:
    return [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]


def test_digits_are_read_without_importing_sklearn(monkeypatch):
    for name in _sklearn_modules():  # as in a fresh launcher (restored afterwards)
        monkeypatch.delitem(sys.modules, name)
    (x, y), (tx, ty) = BUILTIN_DATASETS["digits"].load()
    assert x.shape == (1438, 64) and tx.shape == (359, 64)
    assert _sklearn_modules() == []


def test_digits_equal_sklearns_loader_bit_for_bit():
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = datasets.load_digits()
    want = _split(torch.tensor(bunch.data, dtype=torch.float32) / 16.0,
                  torch.tensor(bunch.target, dtype=torch.int64), test_fraction=0.2)
    got = BUILTIN_DATASETS["digits"].load()
    for (gx, gy), (wx, wy) in zip(got, want):
        assert torch.equal(gx, wx) and torch.equal(gy, wy) and gy.dtype == wy.dtype
