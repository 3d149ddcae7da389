"""psgd.Optimizer under local updates against real in-process shards (sockets, no
processes): one round on one worker is the plain loop, local:1 is BSP, DiLoCo's
outer rule at rate 1 without momentum is local SGD, and the inner state travels
in state_dict."""
import dataclasses

import pytest
import torch
from conftest import run_in_threads
from torch import nn

import psgd
from psgd.config import load_config


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def batches(rank, n):
    g = torch.Generator().manual_seed(10 + rank)
    return [(torch.randn(16, 5, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(n)]


@pytest.fixture
def job(shards):
    """job(model, *sets) -> a config whose two shards serve `model`."""
    def make(model, *sets):
        base = load_config(None, ["cluster.servers=2", "workers.device=cpu", "checkpoint.enabled=false",
                                  "cluster.timeout_s=30", *sets])
        served = shards(base, model)
        return dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, servers=served.addresses))
    return make


def train(cfg, rank, steps, model):
    with psgd.Optimizer(model, cfg, rank=rank) as opt:
        for x, y in batches(rank, steps):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return opt.clock, opt.steps_taken


def run_workers(cfg, steps):
    """Every rank in its own thread; returns each rank's final model."""
    models = [net() for _ in range(cfg.cluster.workers)]
    results = {}
    errors = run_in_threads(lambda rank: results.__setitem__(rank, train(cfg, rank, steps, models[rank])),
                            range(cfg.cluster.workers))
    assert not errors, errors
    return models, results


def test_one_round_on_one_worker_equals_the_plain_loop_with_its_optimizer(job):
    model, reference = net(), net()
    cfg = job(model, "cluster.workers=1", "consistency.mode=asp", "local.steps=5", "optimizer.name=adamw",
              "optimizer.lr=0.01", "optimizer.weight_decay=0.1")
    plain = torch.optim.AdamW(reference.parameters(), lr=0.01, weight_decay=0.1)
    for x, y in batches(0, 5):
        plain.zero_grad()
        nn.functional.cross_entropy(reference(x), y).backward()
        plain.step()
    clock, steps = train(cfg, 0, 5, model)
    assert (clock, steps) == (1, 5)  # one round: one push
    # The model now holds what the shards applied: start - (start - end), end up to rounding.
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_local_1_with_plain_sgd_and_outer_rate_1_is_bsp(job):
    steps = 6
    bsp_models, _ = run_workers(job(net(), "cluster.workers=2", "consistency.mode=bsp", "optimizer.lr=0.1"), steps)
    local_models, results = run_workers(job(net(), "cluster.workers=2", "consistency.mode=bsp", "optimizer.lr=0.1",
                                            "local.steps=1"), steps)
    assert results[0] == (steps, steps)
    for a, b in zip(bsp_models[0].parameters(), local_models[0].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # and the run moved: BSP is not the start
    assert any(not torch.equal(a, b) for a, b in zip(bsp_models[0].parameters(), net().parameters()))


def test_diloco_at_outer_rate_1_without_momentum_is_local_sgd(job):
    common = ["cluster.workers=2", "consistency.mode=bsp", "optimizer.name=adamw", "optimizer.lr=0.01",
              "local.steps=3"]
    local_models, _ = run_workers(job(net(), *common), 6)
    diloco_models, _ = run_workers(job(net(), *common, "local.outer_lr=1.0", "local.outer_momentum=0.0",
                                       "local.outer_nesterov=false"), 6)
    for a, b in zip(local_models[0].parameters(), diloco_models[0].parameters()):
        assert torch.equal(a, b)


def test_diloco_outer_momentum_changes_the_trajectory(job):
    common = ["cluster.workers=2", "consistency.mode=bsp", "optimizer.name=adamw", "optimizer.lr=0.01",
              "local.steps=3"]
    local_models, _ = run_workers(job(net(), *common), 9)
    diloco_models, _ = run_workers(job(net(), *common, "local.outer_lr=0.7", "local.outer_momentum=0.9",
                                       "local.outer_nesterov=true"), 9)
    assert any(not torch.allclose(a, b) for a, b in zip(local_models[0].parameters(), diloco_models[0].parameters()))


def test_the_inner_optimizers_state_and_the_round_travel_in_state_dict(job):
    model = net()
    cfg = job(model, "cluster.workers=1", "consistency.mode=asp", "local.steps=4", "optimizer.name=adam",
              "optimizer.lr=0.01")
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        for x, y in batches(0, 6):  # one round and two steps of the next
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        saved = opt.state_dict()
        assert saved["local"]["taken"] == 2 and opt.steps_taken == 6
        exp_avg = [s["exp_avg"].clone() for s in saved["local"]["inner"]["state"].values()]
        start = [t.clone() for t in saved["local"]["start"]]
    other = net()
    with psgd.Optimizer(other, cfg, rank=0) as again:
        assert again.rounds.local.taken == 0
        again.load_state_dict(saved)
        assert again.rounds.local.taken == 2
        assert all(torch.equal(a, s["exp_avg"]) for a, s in zip(exp_avg, again.rounds.local.inner.state_dict()["state"].values()))
        assert all(torch.equal(a, b) for a, b in zip(start, again.rounds.local.start))
