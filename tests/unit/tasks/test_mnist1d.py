"""MNIST-1D: generated offline, cached, same arrays every time; the 1-D CNN learns it."""
import numpy as np
import torch

from psgd.tasks.mnist1d import CNN1D, cache_path, mnist1d_dataset


def test_generates_offline_caches_and_reloads_identically(tmp_path):
    state = np.random.get_state()
    (x, y), (xt, yt) = mnist1d_dataset(num_samples=200, cache_dir=str(tmp_path))
    assert np.array_equal(np.random.get_state()[1], state[1])  # global numpy RNG left alone
    assert x.shape == (160, 40) and xt.shape == (40, 40) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and set(y.tolist()) <= set(range(10))
    assert cache_path({"num_samples": 200, "seed": 42, "train_split": 0.8}, str(tmp_path)).is_file()
    (x2, y2), (xt2, yt2) = mnist1d_dataset(num_samples=200, cache_dir=str(tmp_path))
    assert torch.equal(x, x2) and torch.equal(y, y2) and torch.equal(xt, xt2) and torch.equal(yt, yt2)
    (x3, _), _ = mnist1d_dataset(num_samples=200, seed=43, cache_dir=str(tmp_path))
    assert not torch.equal(x, x3)


def test_cnn_shapes_and_a_few_steps_of_learning(tmp_path):
    (x, y), _ = mnist1d_dataset(num_samples=500, cache_dir=str(tmp_path))
    torch.manual_seed(0)
    model = CNN1D(40, 10, channels=16)
    assert model(x[:5]).shape == (5, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    first = None
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(x[:128]), y[:128])
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.7 * first


def test_builtin_names(tmp_path, monkeypatch):
    from psgd.config import load_config
    from psgd.tasks import build_model, load_task
    monkeypatch.setenv("PSGD_CACHE_DIR", str(tmp_path))
    cfg = load_config(None, ["task.dataset=mnist1d", "task.model=cnn1d", "task.dataset_args={num_samples: 100}",
                             "task.model_args={channels: 8}"])
    task = load_task(cfg)
    assert task.x_train.shape == (80, 40)
    assert build_model(cfg, task)(task.x_test).shape == (20, 10)
