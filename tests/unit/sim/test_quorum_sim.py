"""Quorum merging on the virtual cluster: the simulator calls the shards' own service, so the
rule is the real one, and the grace window closes on the simulated clock (deterministic)."""
import pytest
import torch
from sgd_reference import cfg_for

from psgd.config import ConfigError, load_config
from psgd.sim import simulate

DILOCO = {"local.steps": 4, "local.outer_lr": 0.7, "local.outer_momentum": 0.9, "local.outer_nesterov": "true",
          "optimizer.name": "adamw", "optimizer.lr": 0.01}


def test_a_quorum_of_every_worker_without_grace_is_synchronous_diloco_bit_for_bit():
    sync, _ = simulate(cfg_for("bsp", 3, **DILOCO), 2.0)
    quorum, _ = simulate(cfg_for("bsp", 3, **DILOCO, **{"consistency.quorum.size": 3}), 2.0)
    assert [s.version for s in quorum.shards] == [s.version for s in sync.shards] == [8, 8]
    assert all(torch.equal(a.params, b.params) for a, b in zip(sync.shards, quorum.shards))
    assert all(s.counters["quorum_carried"] == 0 for s in quorum.shards)


def test_the_grace_window_runs_on_the_simulated_clock_deterministically():
    over = {**DILOCO, "consistency.quorum.size": 2, "consistency.quorum.grace_s": "auto",
            "consistency.quorum.grace_max_s": 0.05, "sim.compute_jitter": 0.3}
    a, ra = simulate(cfg_for("bsp", 3, **over), 2.0)
    b, rb = simulate(cfg_for("bsp", 3, **over), 2.0)
    assert ra.end_s == rb.end_s
    assert all(torch.equal(x.params, y.params) for x, y in zip(a.shards, b.shards))
    assert [x.stats()["quorum_grace"] for x in a.shards] == [y.stats()["quorum_grace"] for y in b.shards]
    windows = [x.stats()["quorum_grace"]["windows"] for x in a.shards]
    assert min(windows) > 0  # the rounds waited on the simulated clock
    sync, _ = simulate(cfg_for("bsp", 3, **DILOCO, **{"sim.compute_jitter": 0.3}), 2.0)
    assert not torch.equal(sync.shards[0].params, a.shards[0].params)  # q < W merged without someone


def test_a_straggler_s_deltas_are_merged_late_and_counted():
    over = {**DILOCO, "consistency.quorum.size": 2, "workers.slowdown": "{2: 3.0}"}
    ex, _ = simulate(cfg_for("bsp", 3, **over), 2.0)
    carried = [s.counters["quorum_carried"] for s in ex.shards]
    assert min(carried) > 0 and carried == [s.counters["push_carried"] for s in ex.shards]
    assert ex.workers[2].steps == ex.workers[0].steps  # nothing lost: the straggler trained its budget


def test_a_killed_worker_stalls_synchronous_rounds_until_its_timeout_but_not_a_quorum():
    """sim.faults.kills: rank 2 dies at 10 ms, mid-round; the shards drop it once it has been silent
    for cluster.timeout_s (0.2 s). Synchronous DiLoCo waits for it that long; a quorum of 2 goes on at once."""
    kill = {"sim.faults.kills": "[{rank: 2, at_s: 0.01}]", "cluster.timeout_s": 0.2, "cluster.heartbeat_s": 0.1}
    sync, sync_run = simulate(cfg_for("bsp", 3, **DILOCO, **kill), 2.0)
    quorum, quorum_run = simulate(cfg_for("bsp", 3, **DILOCO, **kill, **{"consistency.quorum.size": 2}), 2.0)
    assert sync.workers[2].steps < sync.workers[0].steps == 30 and quorum.workers[0].steps == 30
    assert [s.counters["workers_timed_out"] for s in sync.shards] == [1, 1]
    assert sync_run.end_s > 0.2 > quorum_run.end_s  # the stall is the timeout: the survivors' 30 steps take less


def test_a_kill_names_a_worker_that_exists():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["cluster.workers=2", "sim.faults.kills=[{rank: 2, at_s: 1}]"])
    assert err.value.key == "sim.faults.kills[0].rank"


def test_the_old_key_says_where_kills_moved():
    with pytest.raises(ConfigError, match="moved to sim.faults.kills") as err:
        load_config(None, ["sim.kills=[{rank: 0, at_s: 1}]"])
    assert err.value.key == "sim.kills"
