"""Workers killed at stated times (sim.faults.kills): the failure model's kill without the
restart. The dead worker loses the step (under local updates, the round) it was in, nothing is
applied twice, the shards drop it once it has been silent for cluster.timeout_s, and the same
config gives the same run."""
import pytest
import torch
from sgd_reference import cfg_for

from psgd.bench.fault_metrics import account
from psgd.config import ConfigError, Role, load_config
from psgd.sim import Engine, Executor, TimeModel, simulate
from psgd.sim.faults import check_faults

BASE = ["task.model=linear", "task.dataset=synthetic", "task.batch_size=16", "cluster.servers=2",
        "cluster.workers=3", "consistency.mode=asp", "train.steps_per_worker=1000000", "train.max_time_s=10",
        "train.target_accuracy=null", "eval.every_s=2.0", "sim.compute_ms=200"]


def run(*sets):
    cfg = load_config(None, [*BASE, *sets])
    check_faults(cfg)
    ex = Executor(cfg, batched=cfg.sim.batched)
    events: list[dict] = []
    engine = Engine(ex, TimeModel.from_config(cfg.sim, cfg.sim.compute_ms), steps_per_worker=cfg.train.steps_per_worker,
                    max_time_s=cfg.train.max_time_s, eval_every_s=cfg.eval.every_s, emit=events.append)
    engine.run()
    return ex, engine, events


def of(events, name, **match):
    return [e for e in events if e["event"] == name and all(e.get(k) == v for k, v in match.items())]


def timed_out(ex):
    return [s.counters["workers_timed_out"] for s in ex.shards]


def test_a_stated_kill_is_the_storm_s_kill_without_the_restart_and_the_same_run_twice():
    storm = ["sim.faults.kill_every_s=2", "sim.faults.restart_s=0.25", "supervision.backoff_s=0.5",
             "supervision.max_restarts=5", "cluster.timeout_s=2", "sim.faults.kills=[{rank: 2, at_s: 3.1}]"]
    ex, engine, events = run(*storm)
    assert engine.faults.kills == [(2.0, Role.WORKER, 0), (3.1, Role.WORKER, 2), (4.0, Role.WORKER, 1)]
    assert [e["process_index"] for e in of(events, "restart")] == [0, 1]  # the storm's; rank 2 stays dead
    steps2 = [e["t"] for e in of(events, "step", rank=2)]
    assert max(steps2) < 3.1 and len(steps2) == 15  # its 16th step (3.0 s to 3.2 s) died with it
    assert 2 not in {e["rank"] for e in of(events, "done")}  # a killed process says nothing
    assert all(2 not in s.registered for s in ex.shards) and timed_out(ex) == [1, 1]
    # Every update applied once and acknowledged (the accounting's only complaint: the dead rank's done event).
    assert [a.problems for a in account(events, 3)] == [("rank 2 never finished (no done event)",)] * 2
    assert all(s.counters["push_applied"] == s.version and s.counters["duplicates"] == 0 for s in ex.shards)
    _, _, again = run(*storm)
    assert again == events


def test_under_ssp_the_survivor_waits_until_the_dead_worker_has_been_silent_for_timeout_s():
    ex, engine, events = run("cluster.workers=2", "consistency.mode=ssp", "consistency.staleness=1",
                             "cluster.timeout_s=1.0", "cluster.heartbeat_s=0.1", "sim.faults.kills=[{rank: 1, at_s: 1.1}]")
    assert engine.faults.budget.total == 0 and timed_out(ex) == [1, 1]
    steps0 = [e["t"] for e in of(events, "step", rank=0)]
    resumed = min(t for t in steps0 if t > 1.5)  # blocked one clock ahead of the dead rank until it is dropped
    assert not [t for t in steps0 if 1.5 < t < 2.1] and resumed == pytest.approx(2.1, abs=1e-3)


def test_a_push_a_shard_serves_after_the_death_restarts_the_silence():
    """Three pushes queue at one slow shard (100 ms each); rank 0 dies while its push waits or is
    served. The shard serves it after the death, so it drops rank 0 timeout_s after that service,
    not after the kill: BSP's survivors wait that long (and are not left waiting for ever)."""
    ex, engine, events = run("cluster.servers=1", "consistency.mode=bsp", "sim.request_us=100000",
                             "cluster.timeout_s=1.0", "cluster.heartbeat_s=0.1", "sim.faults.kills=[{rank: 0, at_s: 0.25}]")
    # Clock 0 completes with rank 0's gradient (served at 0.3, 0.4 or 0.5 s: the shard's seeded pick);
    # clock 1 waits for rank 0 until the drop, 1 s after that service and so later than 1.25 s.
    first, second = [e["t"] for e in of(events, "step", rank=1)][:2]
    assert first == pytest.approx(0.5, abs=1e-3)
    assert 1.3 - 1e-3 <= second <= 1.5 + 1e-3 and timed_out(ex) == [1]
    assert not of(events, "step", rank=0)


def test_under_local_updates_a_killed_worker_loses_its_round_in_progress():
    local = ["consistency.mode=bsp", "local.steps=4", "train.steps_per_worker=12", "sim.compute_ms=100",
             "cluster.timeout_s=0.5", "cluster.heartbeat_s=0.1", "sim.faults.kills=[{rank: 2, at_s: 0.65}]"]
    ex, engine, events = run(*local)
    steps2 = [e["t"] for e in of(events, "step", rank=2)]
    # Round 1 (4 steps) was pushed; round 2's first step ended at 0.5 s and its second at 0.6 s:
    # those two inner steps and the third under way die with it, and nothing of round 2 arrives.
    assert len(steps2) == 6 and max(steps2) < 0.65
    assert [s.last_seq for s in ex.shards] == [[2, 2, 0]] * 2  # seqs from 0: rank 2 pushed round 1 only
    assert timed_out(ex) == [1, 1]
    done = {e["rank"]: e for e in of(events, "done")}
    assert sorted(done) == [0, 1] and all(d["seqs"] == 3 for d in done.values())  # the survivors' 12 steps
    # BSP waited for the dead worker's round 2 until it was dropped, 0.5 s after its death.
    after = [e["t"] for e in of(events, "step", rank=0) if e["t"] > 0.71]
    assert min(after) == pytest.approx(0.65 + 0.5, abs=1e-3)


def test_batched_gradients_run_stated_kills_with_the_same_times_as_one_by_one():
    kill = ["sim.faults.kills=[{rank: 1, at_s: 1.05}]", "train.max_time_s=3"]
    one, _, exact = run(*kill)
    batched, _, together = run(*kill, "sim.batched=true")
    assert batched.batched_steps > 0
    def when(events):
        return [(e["t"], e["rank"], e["clock"]) for e in of(events, "step")]
    assert when(together) == when(exact)
    assert max(t for t, rank, _ in when(exact) if rank == 1) < 1.05


DILOCO = {"local.steps": 8, "local.outer_lr": 0.7, "local.outer_momentum": 0.9, "local.outer_nesterov": "true",
          "optimizer.name": "adamw", "optimizer.lr": 0.01, "cluster.servers": 4}


@pytest.mark.parametrize("mode, over", [
    ("ssp", {"consistency.staleness": 1}),
    ("bsp", {**DILOCO, "consistency.quorum.size": 2, "sim.compute_jitter": 0.3}),
    ("bsp", {**DILOCO, "local.fragments": 4, "local.fragment_sync_delay": 1}),
    ("asp", {"sim.batched": "true"}),
], ids=["ssp", "diloco-quorum", "streaming-diloco", "batched"])
def test_the_failure_model_changes_nothing_until_a_kill(mode, over):
    clean, clean_run = simulate(cfg_for(mode, 3, **over), 2.0)
    watched, watched_run = simulate(cfg_for(mode, 3, **over, **{"sim.faults.kills": "[{rank: 2, at_s: 100}]"}), 2.0)
    assert watched_run.end_s == clean_run.end_s and watched_run.steps == clean_run.steps
    assert all(torch.equal(a.params, b.params) for a, b in zip(clean.shards, watched.shards))


def test_a_streaming_diloco_worker_killed_mid_round_is_dropped_by_every_shard():
    kill = {"sim.faults.kills": "[{rank: 2, at_s: 0.013}]", "cluster.timeout_s": 0.2, "cluster.heartbeat_s": 0.1}
    ex, run_ = simulate(cfg_for("bsp", 3, **DILOCO, **kill, **{"local.fragments": 4}), 2.0)
    assert [w.steps for w in ex.workers][:2] == [30, 30] and ex.workers[2].steps < 8  # dead inside its first round
    assert timed_out(ex) == [1, 1, 1, 1] and run_.end_s > 0.013 + 0.2


@pytest.mark.parametrize("sets, accepted", [
    (["local.steps=2"], True),
    (["sim.batched=true"], True),
    (["consistency.mode=allreduce"], False),
])
def test_stated_kills_run_where_restarts_cannot_but_not_under_allreduce(sets, accepted):
    cfg = load_config(None, [*BASE, "sim.faults.kills=[{rank: 0, at_s: 1}]", *sets])
    if accepted:
        check_faults(cfg)
        return
    with pytest.raises(ConfigError, match="sim.faults.kills.*all-reduce"):
        check_faults(cfg)
