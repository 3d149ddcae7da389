"""Local updates on the virtual cluster run the workers' own rounds (psgd.workers.local_rounds)
and the shards' outer rule: the same algebra the real-process tests check."""
import math

import pytest
import torch
from sgd_reference import STEPS, assert_servers_equal, cfg_for, reference_geo, reference_sgd

from psgd.sim import simulate


def test_local_1_with_sgd_is_bsp():
    bsp, _ = simulate(cfg_for("bsp", 3), 2.0)
    local, _ = simulate(cfg_for("bsp", 3, **{"local.steps": 1}), 2.0)
    for a, b in zip(bsp.shards, local.shards):
        torch.testing.assert_close(a.params, b.params, rtol=0, atol=1e-5)


def test_one_worker_s_rounds_of_sgd_are_a_plain_loop():
    cfg = cfg_for("asp", 1, **{"local.steps": 4})
    ex, _ = simulate(cfg, 2.0)
    assert [s.version for s in ex.shards] == [math.ceil(STEPS / 4)] * 2  # the last, shorter round is flushed
    assert_servers_equal(ex, reference_sgd(cfg, STEPS), atol=1e-6)


def test_rounds_push_deltas_and_the_bytes_fall_by_the_round_length():
    plain, plain_run = simulate(cfg_for("bsp", 2), 2.0)
    local, local_run = simulate(cfg_for("bsp", 2, **{"local.steps": 5}), 2.0)
    assert plain_run.steps == local_run.steps == 2 * STEPS  # every training step is counted once
    sent = [w.encoder.wire_bytes for w in local.workers]
    assert sent == [w.encoder.wire_bytes // 5 for w in plain.workers]
    assert all(w.local.rounds == STEPS // 5 for w in local.workers)


def test_diloco_on_the_simulator_is_deterministic():
    over = {"local.steps": 4, "local.outer_lr": 0.7, "local.outer_momentum": 0.9, "local.outer_nesterov": "true",
            "optimizer.name": "adamw", "optimizer.lr": 0.01}
    a, _ = simulate(cfg_for("asp", 3, **over), 2.0)
    b, _ = simulate(cfg_for("asp", 3, **over), 2.0)
    assert all(torch.equal(x.params, y.params) for x, y in zip(a.shards, b.shards))


DILOCO = {"local.outer_lr": 0.7, "local.outer_momentum": 0.9, "local.outer_nesterov": "true",
          "optimizer.name": "adamw", "optimizer.lr": 0.01}


@pytest.mark.parametrize("mode", ["asp", "ssp"])
@pytest.mark.parametrize("over", [{}, DILOCO, {**DILOCO, "local.delayed_nesterov": "true"}],
                         ids=["geo-vs-local", "async-diloco-vs-diloco", "delayed-nesterov-vs-diloco"])
def test_with_one_worker_the_asynchronous_local_modes_are_the_synchronous_ones(mode, over):
    """One worker has no one to be stale against: each delta is the round's only one, so
    GEO-SGD is local SGD and asynchronous DiLoCo is DiLoCo, bit for bit. Delayed Nesterov's
    period is cluster.workers = 1: its momentum moves on every delta, as DiLoCo's does."""
    synchronous = {k: v for k, v in over.items() if k != "local.delayed_nesterov"}  # bsp averages already
    sync, _ = simulate(cfg_for("bsp", 1, **{"local.steps": 4, **synchronous}), 2.0)
    live, _ = simulate(cfg_for(mode, 1, **{"local.steps": 4, **over}), 2.0)
    plain, _ = simulate(cfg_for(mode, 1, **{"local.steps": 4}), 2.0)
    assert [s.version for s in live.shards] == [math.ceil(STEPS / 4)] * 2
    for a, b, p in zip(sync.shards, live.shards, plain.shards):
        assert torch.equal(a.params, b.params)
        assert over == {} or not torch.allclose(b.params, p.params, atol=1e-3)  # the outer rule took effect


def test_geo_sgd_with_three_workers_follows_the_algorithm(monkeypatch):
    """Each delta applied alone at its share 1 / W of the outer rate, each worker's next round
    from where its own push left the servers: GEO-SGD, checked to float rounding. Workers in
    lock-step push together, and a seeded draw orders them (psgd.sim.jitter.SendOrder): the
    reference applies the deltas in the order shard 0 served them."""
    from psgd.sim.executor import Executor
    cfg = cfg_for("asp", 3, **{"local.steps": 4, "local.outer_lr": 0.9})
    served, serve = [], Executor.serve_push

    def recording(self, push):
        if push.shard == 0:
            served.append(push.rank)
        return serve(self, push)
    monkeypatch.setattr(Executor, "serve_push", recording)
    ex, _ = simulate(cfg, 2.0)
    orders = [served[i:i + 3] for i in range(0, len(served), 3)]
    assert all(sorted(o) == [0, 1, 2] for o in orders)  # every round complete before the next
    assert_servers_equal(ex, reference_geo(cfg, STEPS, orders), atol=1e-6)
