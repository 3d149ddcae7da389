"""Batched gradients (psgd.sim.batched): the same maths as one by one, within
float tolerance; the same simulated run; a fallback, with its reason, where
vmap cannot be trusted."""
import pytest
import torch
from sgd_reference import cfg_for
from torch import nn

from psgd.config import override_config
from psgd.sim.batched import RTOL, max_relative_error, static_fallback
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.time_model import TimeModel

K = 6


def _mnist1d_cfg():
    return cfg_for("asp", K, **{"task.model": "cnn1d", "task.dataset": "mnist1d", "task.batch_size": 8,
                                "task.dataset_args": "{num_samples: 400}", "task.model_args": "{channels: 16}"})


def _distinct_versions(ex_a, ex_b):
    """Every worker of both executors at its own parameters (K versions), the same in both."""
    gen = torch.Generator().manual_seed(1)
    for wa, wb in zip(ex_a.workers, ex_b.workers):
        own = [p + 0.05 * torch.randn(p.shape, generator=gen) for p in wa.params]
        wa.params, wb.params = own, [p.clone() for p in own]


@pytest.mark.parametrize("cfg", [cfg_for("asp", K, **{"cluster.servers": 3}), _mnist1d_cfg()],
                         ids=["mlp-3-shards", "mnist1d-cnn"])
def test_a_batch_of_workers_gradients_equals_the_one_by_one_gradients(cfg):
    batched, exact = Executor(cfg, batched=True), Executor(cfg, batched=False)
    assert batched.batcher is not None and exact.batcher is None
    _distinct_versions(batched, exact)
    steps = {r: 0.0 for r in range(K)}
    got, want = batched.compute_together(steps), exact.compute_together(steps)
    assert batched.batched_steps == K and batched.batch_fallback is None
    assert exact.batched_steps == 0
    for r in range(K):
        assert [p.shard for p in got[r]] == [p.shard for p in want[r]]
        err = max_relative_error([p.grad for p in got[r]], [p.grad for p in want[r]])
        assert err <= RTOL, (r, err)
        assert batched.workers[r].last_loss == pytest.approx(exact.workers[r].last_loss, rel=1e-6)
        assert batched.workers[r].seq == exact.workers[r].seq == 1
    # The versions differed, so did the gradients: a batch that reused one version would fail above.
    assert not torch.allclose(got[0][0].grad, got[1][0].grad)


def _run(cfg, batched: bool):
    ex = Executor(cfg, batched=batched)
    events = []
    Engine(ex, TimeModel.from_config(cfg.sim, cfg.sim.compute_ms), steps_per_worker=cfg.train.steps_per_worker,
           max_time_s=cfg.train.max_time_s, eval_every_s=0.01, emit=events.append).run()
    return ex, events


@pytest.mark.parametrize("mode", ["asp", "ssp"])
def test_a_batched_run_ends_where_the_one_by_one_run_ends(mode):
    cfg = cfg_for(mode, 8, **{"sim.compute_jitter": 0.5, "consistency.staleness": 2})
    ex_b, ev_b = _run(cfg, batched=True)
    ex_e, ev_e = _run(cfg, batched=False)
    # Jitter spreads the steps: some batches hold one worker (taken one by one), most hold several.
    assert 8 * cfg.train.steps_per_worker / 4 < ex_b.batched_steps < 8 * cfg.train.steps_per_worker
    assert ex_e.batched_steps == 0
    # Time does not depend on the gradients' last bits: the very same events, in the same order.
    key = [(e["t"], e["event"], e["role"], e["index"], e.get("clock")) for e in ev_b]
    assert key == [(e["t"], e["event"], e["role"], e["index"], e.get("clock")) for e in ev_e]
    for got, want in zip(ex_b.server_params(), ex_e.server_params()):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    losses = [(e["loss"], f["loss"]) for e, f in zip(ev_b, ev_e) if e["event"] == "step"]
    assert losses and all(a == pytest.approx(b, rel=1e-4) for a, b in losses)


class _Noisy(nn.Module):
    """Draws random numbers in its forward pass without a dropout module."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 10)

    def forward(self, x):
        return self.lin(x.flatten(1) + 0.01 * torch.randn_like(x.flatten(1)))


def test_static_fallback_names_batchnorm_in_training_and_dropout():
    bn = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    assert "BatchNorm1d in training mode" in static_fallback(bn)
    assert static_fallback(bn.eval()) is None
    assert "Dropout draws random numbers" in static_fallback(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)))
    assert static_fallback(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0))) is None


@pytest.mark.parametrize("make, reason", [
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.BatchNorm1d(8), nn.Linear(8, 10)), "BatchNorm1d"),
    (_Noisy, "vmap failed"),
], ids=["batchnorm", "randomness"])
def test_a_model_vmap_cannot_run_falls_back_to_one_by_one_with_its_reason(monkeypatch, make, reason):
    import psgd.sim.executor as executor
    monkeypatch.setattr(executor, "build_model", lambda cfg, task: make())
    cfg = cfg_for("asp", K)
    ex = Executor(cfg, batched=True)
    pushes = ex.compute_together({r: 0.0 for r in range(K)})
    assert ex.batcher is None and reason in ex.batch_fallback
    assert ex.batched_steps == 0 and sorted(pushes) == list(range(K))
    assert all(w.steps == 1 and w.seq == 1 for w in ex.workers)  # each step taken once, by the exact path


def test_a_config_turns_batching_on_and_local_updates_name_why_not():
    cfg = cfg_for("asp", 2, **{"sim.batched": "true"})
    assert cfg.sim.batched is True and cfg_for("asp", 2).sim.batched is False  # opt-in
    local = override_config(cfg_for("asp", 2), ["local.steps=2"])
    ex = Executor(local, batched=True)
    assert ex.batcher is None and "local updates" in ex.batch_fallback
