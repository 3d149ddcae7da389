"""The eager outer step (local.eager) through psgd.Optimizer against real in-process shards
(sockets, no processes): each round starts from the newest parameters the worker has minus
its own delta, the outer update of a round is folded in one round later, and the shards count
that round of delay. The reference below is the algorithm written out with torch.optim on
per-parameter tensors, independent of the worker's flat buffers and the shards' rule."""
import dataclasses

import pytest
import torch
from conftest import run_in_threads
from torch import nn

import psgd
from psgd.config import ConfigError, load_config

WORKERS, H, ROUNDS, INNER_LR, OUTER_LR = 2, 3, 4, 0.1, 0.7
DILOCO = ("local.outer_momentum=0.9", "local.outer_nesterov=true")


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))


def batches(rank):
    g = torch.Generator().manual_seed(10 + rank)
    return [(torch.randn(8, 5, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(H * ROUNDS)]


@pytest.fixture
def job(shards):
    def make(*sets):
        base = load_config(None, ["cluster.servers=2", f"cluster.workers={WORKERS}", "workers.device=cpu",
                                  "checkpoint.enabled=false", "cluster.timeout_s=30", "consistency.mode=bsp",
                                  f"local.steps={H}", f"optimizer.lr={INNER_LR}", f"local.outer_lr={OUTER_LR}", *sets])
        served = shards(base, net())
        return dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, servers=served.addresses)), served
    return make


def train(cfg):
    delayed, models = {}, {}

    def work(rank):
        model = models[rank] = net()
        with psgd.Optimizer(model, cfg, rank=rank) as opt:
            for x, y in batches(rank):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            delayed[rank] = opt.rounds.done_fields().get("outer_delayed_rounds", 0)
            opt.flush()
    errors = run_in_threads(work, range(WORKERS))
    assert not errors, errors
    return delayed, models


def reference(eager: bool, momentum: float = 0.0) -> list[torch.Tensor]:
    """DiLoCo over per-parameter tensors: inner torch SGD, outer torch SGD with Nesterov
    momentum on the mean delta. eager: round k+1 starts at theta_k - D_k (the outer update
    of round k arrives one round later); else at theta_{k+1}."""
    theta = [p.detach().clone() for p in net().parameters()]
    outer = [p.clone().requires_grad_() for p in theta]
    outer_opt = torch.optim.SGD(outer, lr=OUTER_LR, momentum=momentum, nesterov=momentum > 0)
    starts = [[t.clone() for t in theta] for _ in range(WORKERS)]
    data = [batches(r) for r in range(WORKERS)]
    for k in range(ROUNDS):
        deltas = []
        for m in range(WORKERS):
            model = net()
            with torch.no_grad():
                for p, s in zip(model.parameters(), starts[m]):
                    p.copy_(s)
            inner = torch.optim.SGD(model.parameters(), lr=INNER_LR)
            for x, y in data[m][k * H:(k + 1) * H]:
                inner.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                inner.step()
            deltas.append([s - p.detach() for s, p in zip(starts[m], model.parameters())])
        if eager:  # the newest parameters a worker holds are theta_k: its previous push's reply
            starts = [[t - d for t, d in zip(theta, deltas[m])] for m in range(WORKERS)]
        outer_opt.zero_grad()
        for p, *ds in zip(outer, *deltas):
            p.grad = sum(ds) / WORKERS
        outer_opt.step()
        theta = [p.detach().clone() for p in outer]
        if not eager:
            starts = [[t.clone() for t in theta] for _ in range(WORKERS)]
    return theta



def test_the_eager_fold_is_exact_and_the_delay_is_one_round(job):
    """Outer SGD at 0.7 without momentum: the shards' rule and torch's take the same float
    steps, so the worker's fold (flat buffers) must match the reference bit for bit."""
    cfg, cluster = job("local.eager=true")
    delayed, models = train(cfg)
    assert delayed == {r: ROUNDS for r in range(WORKERS)}  # every round began without its predecessor's update
    want = cluster.layout.flatten(reference(eager=True))
    for shard, expected in zip(cluster.servers, want):
        assert shard.state.version == ROUNDS
        assert torch.equal(shard.state.params, expected)
        # The first round read the initial parameters; every later one the parameters one merge old.
        assert shard.state.staleness_hist.as_dict() == {"0": WORKERS, "1": WORKERS * (ROUNDS - 1)}
    synchronous = cluster.layout.flatten(reference(eager=False))
    assert not torch.allclose(torch.cat(want), torch.cat(synchronous), atol=1e-4)  # the delay changed the path
    final = cluster.layout.flatten([p.detach() for p in models[0].parameters()])
    assert all(torch.equal(f, s.state.params) for f, s in zip(final, cluster.servers))  # flush took the end


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "synchronous"])
def test_diloco_with_and_without_the_eager_step_follows_the_reference(job, eager):
    """With Nesterov outer momentum the shards' rule equals torch's to float rounding."""
    cfg, cluster = job(*DILOCO, *(["local.eager=true"] if eager else []))
    delayed, _ = train(cfg)
    assert delayed == {r: ROUNDS if eager else 0 for r in range(WORKERS)}
    for shard, expected in zip(cluster.servers, cluster.layout.flatten(reference(eager, momentum=0.9))):
        torch.testing.assert_close(shard.state.params, expected, rtol=0, atol=1e-6)


def test_eager_needs_local_updates_and_real_processes():
    with pytest.raises(ConfigError, match="local.eager") as err:
        load_config(None, ["local.eager=true"])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="local.eager"):
        load_config(None, ["local.steps=4", "local.eager=true", "cluster.launcher=sim"])
