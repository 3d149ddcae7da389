"""Built-in tasks, user callables, and the per-worker data split."""
import pytest
import torch

from psgd.config import load_config
from psgd.tasks import build_model, load_task, resolve_callable, worker_batches


def test_digits_is_local_and_split_fixed():
    cfg = load_config(None, [])
    a, b = load_task(cfg), load_task(cfg)
    assert a.x_train.shape == (1438, 64) and a.x_test.shape == (359, 64)
    assert torch.equal(a.y_test, b.y_test)
    assert not a.regression and int(a.y_train.max()) == 9


def test_models_are_seeded_identically():
    cfg = load_config(None, ["task.model=cnn"])
    task = load_task(cfg)
    m1, m2 = build_model(cfg, task), build_model(cfg, task)
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    assert m1(task.x_test[:5]).shape == (5, 10)


def test_synthetic_has_a_known_optimum():
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic"])
    task = load_task(cfg)
    assert task.regression
    sol = torch.linalg.lstsq(torch.cat([task.x_train, torch.ones(len(task.x_train), 1)], 1),
                             task.y_train.unsqueeze(1)).solution
    resid = torch.cat([task.x_train, torch.ones(len(task.x_train), 1)], 1) @ sol - task.y_train.unsqueeze(1)
    assert float(resid.abs().max()) < 1e-4  # noise-free: the optimum fits exactly


def test_worker_shares_are_disjoint_and_reshuffled():
    n, workers, batch = 100, 4, 5
    first_epoch = [[next(it) for _ in range(25 // batch)]
                   for it in (worker_batches(n, r, workers, batch, seed=7) for r in range(workers))]
    seen = torch.cat([torch.cat(bs) for bs in first_epoch])
    assert sorted(seen.tolist()) == list(range(n))  # every example once per epoch, no overlap
    it = worker_batches(n, 0, workers, batch, seed=7)
    e1 = torch.cat([next(it) for _ in range(5)])
    e2 = torch.cat([next(it) for _ in range(5)])
    assert sorted(e1.tolist()) == sorted(e2.tolist()) and e1.tolist() != e2.tolist()
    again = worker_batches(n, 0, workers, batch, seed=7)
    assert torch.equal(torch.cat([next(again) for _ in range(5)]), e1)


def test_a_share_smaller_than_the_batch_wraps_around_its_epochs():
    n, workers, batch = 46, 2, 32  # 23 examples each, as 1438 digits over 64 workers
    it = worker_batches(n, 1, workers, batch, seed=3)
    stream = torch.cat([next(it) for _ in range(23)])  # 23 batches of 32 = 32 whole epochs of 23
    epochs = stream.view(32, 23)
    share = sorted(epochs[0].tolist())
    assert len(set(share)) == 23  # the rank's 23 distinct examples
    assert all(sorted(e.tolist()) == share for e in epochs)  # every epoch is the whole share once
    assert epochs[0].tolist() != epochs[1].tolist()  # reshuffled each epoch
    other = worker_batches(n, 0, workers, batch, seed=3)
    assert not set(share) & set(next(other).tolist())  # shares stay disjoint


def test_a_worker_without_examples_is_an_error():
    with pytest.raises(ValueError, match="worker 5 has no examples: 4 examples for 8 workers"):
        next(worker_batches(4, 5, 8, 1, seed=0))


def test_resolve_callable_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="module.path:callable"):
        resolve_callable("nocolon", str(tmp_path))
    with pytest.raises(ValueError, match="cannot import"):
        resolve_callable("no_such_module_xyz:f", str(tmp_path))
    (tmp_path / "usermod.py").write_text("x = 3\n")
    with pytest.raises(ValueError, match="no callable"):
        resolve_callable("usermod:x", str(tmp_path))
