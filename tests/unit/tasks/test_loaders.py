"""Workers' data through DataLoaders: the same batches as before for tensors, and
map-style Datasets kept as they are (read on access, checked on their first item)."""
import pytest
import torch
from torch.utils.data import Dataset

from psgd.config import load_config
from psgd.tasks import build_model, load_task, worker_batches
from psgd.tasks.loaders import TensorPairs, eval_batches, train_loader


class Counting(Dataset):
    """A map-style dataset that records which items were read."""

    def __init__(self, x, y):
        self.x, self.y, self.read = x, y, set()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.read.add(i)
        return self.x[i], int(self.y[i])


def test_tensor_batches_are_the_worker_share_in_the_seeded_order():
    x, y = torch.randn(100, 3), torch.arange(100)
    batches = train_loader(TensorPairs(x, y), rank=1, workers=3, batch_size=8, seed=5)
    expected = worker_batches(100, 1, 3, 8, 5)
    for _ in range(10):  # past the end of an epoch: the loader is endless too
        idx = next(expected)
        bx, by = next(batches)
        assert torch.equal(bx, x[idx]) and torch.equal(by, y[idx])


def test_a_map_style_dataset_gives_the_same_batches_as_its_tensors():
    x, y = torch.randn(64, 3), torch.arange(64) % 4
    lazy = train_loader(Counting(x, y), 0, 2, 8, seed=0)
    eager = train_loader(TensorPairs(x, y), 0, 2, 8, seed=0)
    for _ in range(5):
        (lx, ly), (ex, ey) = next(lazy), next(eager)
        assert torch.equal(lx, ex) and torch.equal(ly, ey)
    assert [len(b[1]) for b in eval_batches(TensorPairs(x, y), 30)] == [30, 30, 4]


def make_counting():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 4, generator=g), torch.randint(0, 3, (80,), generator=g)
    make_counting.sets = (Counting(x[:60], y[:60]), Counting(x[60:], y[60:]))
    return make_counting.sets


def test_load_task_keeps_a_dataset_lazy_and_evaluates_it_like_tensors(tmp_path, monkeypatch):
    monkeypatch.setattr("psgd.tasks.registry.resolve_callable", lambda spec, base: make_counting)
    cfg = load_config(None, ["task.dataset=mine:data", "task.model=mine:net"])
    task = load_task(cfg)
    train, test = make_counting.sets
    assert task.train_set is train and task.test_set is test and task.x_train is None
    assert train.read == {0} and test.read == {0}  # checked on the first item only
    assert task.shape.in_features == 4 and task.shape.num_outputs == 0  # classes unknown without reading all
    model = torch.nn.Linear(4, 3)
    eager = load_task(cfg)
    eager.test_set = None
    eager.x_test, eager.y_test = test.x, test.y
    assert task.evaluate(model) == pytest.approx(eager.evaluate(model))
    with pytest.raises(ValueError, match="built-in model 'mlp' needs the number of classes"):
        build_model(load_config(None, ["task.dataset=mine:data"]), task)
