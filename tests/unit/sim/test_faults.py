"""The virtual cluster's failure model (psgd.sim.faults): kills at the planned times, restarts
by the launcher's rules, a restarted shard with every update it applied, exactly-once
across it all, and the same run bit for bit."""
import pytest
import torch

from psgd.bench.fault_metrics import Kill, account, recoveries
from psgd.config import ConfigError, Role, load_config
from psgd.sim import Engine, Executor, TimeModel
from psgd.sim.faults import check_faults

BASE = ["task.model=linear", "task.dataset=synthetic", "task.batch_size=16", "cluster.servers=2",
        "cluster.workers=3", "consistency.mode=asp", "train.steps_per_worker=1000000", "train.max_time_s=10",
        "train.target_accuracy=null", "eval.every_s=2.0", "sim.compute_ms=200", "supervision.max_restarts=5",
        "sim.faults.kill_every_s=2", "sim.faults.restart_s=0.25", "supervision.backoff_s=0.5"]


def run(*sets):
    cfg = load_config(None, [*BASE, *sets])
    check_faults(cfg)
    ex = Executor(cfg)
    events: list[dict] = []
    engine = Engine(ex, TimeModel.from_config(cfg.sim, cfg.sim.compute_ms), steps_per_worker=cfg.train.steps_per_worker,
                    max_time_s=cfg.train.max_time_s, eval_every_s=cfg.eval.every_s, emit=events.append)
    engine.run()
    return cfg, ex, engine, events


def of(events, name, **match):
    return [e for e in events if e["event"] == name and all(e.get(k) == v for k, v in match.items())]


def final_stats(events):
    return {e["index"]: e for e in of(events, "server_stats")}


def kills(engine):
    return [Kill(t, role, index, 0) for t, role, index in engine.faults.kills]


def test_killed_workers_restart_after_the_backoff_rejoin_and_nothing_is_applied_twice():
    cfg, ex, engine, events = run()
    made = kills(engine)
    assert [(k.t, k.index) for k in made] == [(2.0, 0), (4.0, 1)]  # 6 s would not be back 5 s before the end
    restarts = of(events, "restart")
    assert [(e["t"], e["process_index"], e["attempt"]) for e in restarts] == [(2.0, 0, 1), (4.0, 1, 1)]
    for k in made:  # back after backoff_s + restart_s, registered with every shard at that instant
        registered = [e for e in of(events, "register", rank=k.index) if e["t"] > k.t]
        assert sorted(e["index"] for e in registered) == [0, 1]
        assert {e["t"] for e in registered} == {round(k.t + 0.5 + 0.25, 6)}
    for rec in recoveries(events, made, 3, 2):
        assert rec.lost_s == pytest.approx(0.75)
    # Nobody steps while dead: the killed rank's steps stop at the kill and resume at its return.
    steps0 = [e["t"] for e in of(events, "step", rank=0)]
    assert not [t for t in steps0 if 2.0 < t < 2.75]
    # Exactly once: every shard acked as applied what it applied, and the ranks' seqs (every
    # incarnation's) reconcile with it; the restarted ranks' own pushes are fewer than their seqs.
    assert all(not a.problems for a in account(events, 3)), [a.problems for a in account(events, 3)]
    done = {e["rank"]: e for e in of(events, "done")}
    assert done[0]["pushes"] < done[0]["seqs"] and done[2]["pushes"] == done[2]["seqs"]
    assert {s: st["version"] for s, st in final_stats(events).items()} == {s: ex.shards[s].version for s in (0, 1)}


def test_the_same_storm_twice_is_the_same_run_bit_for_bit():
    for target in ("workers", "shards"):
        sets = [f"sim.faults.target={target}", "cluster.request_timeout_s=1.0"]
        _, a, _, ea = run(*sets)
        _, b, _, eb = run(*sets)
        assert ea == eb, target
        assert all(torch.equal(x, y) for x, y in zip(a.server_params(), b.server_params()))


def test_a_killed_shard_comes_back_with_every_update_it_applied_and_the_workers_rejoin_it():
    cfg, ex, engine, events = run("sim.faults.target=shards", "cluster.request_timeout_s=1.0")
    made = kills(engine)
    assert [(k.t, k.role, k.index) for k in made] == [(2.0, Role.SERVER, 0), (4.0, Role.SERVER, 1)]
    for k in made:
        before = max(e["version"] for e in of(events, "server_stats", index=k.index) if e["t"] <= k.t)
        after = [e["version"] for e in of(events, "server_stats", index=k.index) if e["t"] > k.t]
        assert after and min(after) >= before  # the checkpoint rules: nothing applied is lost
        # Every worker registered with the new incarnation (its first request there: not_registered).
        rejoined = {e["rank"] for e in of(events, "register", index=k.index) if e["t"] > k.t}
        assert rejoined == {0, 1, 2}
    for rec in recoveries(events, made, 3, 2):  # back after the backoff; the workers resend after 1 s
        assert 0.75 <= rec.lost_s <= 0.75 + 2 * 1.0
    assert all(not a.problems for a in account(events, 3)), [a.problems for a in account(events, 3)]
    stats = final_stats(events)
    assert all(st["counters"]["push_applied"] == st["version"] for st in stats.values())
    # The workers kept training through both: no kill of a shard stopped the run.
    assert min(e["clock"] for e in of(events, "done")) > 20


def test_without_checkpoints_a_killed_shard_starts_again_from_the_initial_parameters():
    cfg, ex, engine, events = run("sim.faults.target=shards", "cluster.request_timeout_s=1.0",
                                  "checkpoint.enabled=false")
    before = max(e["version"] for e in of(events, "server_stats", index=0) if e["t"] <= 2.0)
    after = [e["version"] for e in of(events, "server_stats", index=0) if e["t"] > 2.0]
    assert before > 0 and after[0] < before  # what it had applied is gone, as on a real shard
    # A worker's repeated push read a version the fresh shard never had: refused (bad_version), the
    # worker's call fails and the launcher restarts it, as a real worker's RemoteError would.
    assert any("refused its push (bad_version" in e["cause"] for e in of(events, "restart", process="worker"))
    assert {e["rank"] for e in of(events, "register", index=0) if e["t"] > 2.0} == {0, 1, 2}


def test_under_ssp_a_dead_worker_leaves_the_quorum_after_timeout_s_and_the_bound_holds():
    cfg, ex, engine, events = run("consistency.mode=ssp", "consistency.staleness=2", "cluster.timeout_s=2.0",
                                  "sim.faults.restart_s=3.0")  # away 3.5 s, longer than timeout_s
    assert all(e["gap"] <= 2 for e in of(events, "step"))
    # Rank 0 is away from 2 s to 5.5 s, rank 1 from 4 s to 7.5 s; the shards drop each 2 s after
    # its kill. So rank 2 waits for dead rank 1 from just after 4 s until 6 s, and trains on after.
    steps = of(events, "step")
    assert [e for e in steps if 4.5 < e["t"] < 5.5] == []  # its staleness allowance (2 clocks) used up
    assert len([e for e in steps if e["rank"] != 1 and 6.0 < e["t"] < 7.5]) > 5
    assert all(not a.problems for a in account(events, 3))


def test_more_deaths_than_max_restarts_fail_the_run_as_the_launcher_would():
    with pytest.raises(ConfigError, match="supervision.max_restarts"):
        run("supervision.max_restarts=0")


@pytest.mark.parametrize("sets, reason", [
    (["consistency.mode=allreduce"], "all-reduce ranks cannot rejoin"),
    (["local.steps=2"], "local updates"),
    (["sim.batched=true"], "sim.batched"),
    (["sim.faults.kill_every_s=30"], "no kill fits"),
])
def test_what_the_model_cannot_run_is_refused_naming_the_key(sets, reason):
    with pytest.raises(ConfigError, match=f"sim.faults.kill_every_s.*{reason}"):
        check_faults(load_config(None, [*BASE, *sets]))


def test_a_lost_request_is_resent_when_its_shard_is_back_whatever_the_request_timeout():
    # Kills 2 s apart: the shard is back 0.75 s after each (backoff 0.5 + restart 0.25). The workers see
    # its connection come back and resend at once: no wait for the request timeout, 1 s or 30 s.
    for timeout in (1.0, 30.0):
        _, _, engine, events = run("sim.faults.target=shards", f"cluster.request_timeout_s={timeout}")
        lost = [rec.lost_s for rec in recoveries(events, kills(engine), 3, 2)]
        assert len(lost) == 2 and all(0.75 <= s < 0.75 + 0.05 for s in lost), (timeout, lost)
        assert all(not a.problems for a in account(events, 3))


def test_with_a_replica_a_killed_shard_is_served_by_its_backup_after_promote_s():
    cfg, ex, engine, events = run("sim.faults.target=shards", "cluster.replicas=1", "sim.faults.promote_s=0.1")
    made = kills(engine)
    assert [(k.t, k.index) for k in made] == [(2.0, 0), (4.0, 1)]
    promoted = of(events, "promoted")
    assert [(e["t"], e["index"]) for e in promoted] == [(2.1, 0), (4.1, 1)]
    for k, e in zip(made, promoted):  # the backup holds every update the primary applied
        before = max(st["version"] for st in of(events, "server_stats", index=k.index) if st["t"] <= k.t)
        assert e["version"] >= before
    lost = [rec.lost_s for rec in recoveries(events, made, 3, 2)]
    assert all(0.1 <= s < 0.1 + 0.05 for s in lost), lost
    assert all(not a.problems for a in account(events, 3))
    # Each dead process came back as its shard's new backup (backoff + restart_s after the kill).
    assert engine.faults.backups == [1, 1]
    assert [e["process_index"] for e in of(events, "restart", process="server")] == [0, 1]


def test_a_primary_killed_again_before_its_new_backup_is_up_waits_for_a_restart():
    # One shard, kills 0.5 s apart: the backup takes over after the first; the second kill finds the
    # dead process's restart (backoff 0.5 + restart 0.25) not yet up, so the shard waits for a process.
    _, _, engine, events = run("sim.faults.target=shards", "cluster.servers=1", "cluster.replicas=1",
                               "sim.faults.kill_every_s=0.5", "sim.faults.promote_s=0.1")
    first, second = kills(engine)[:2]
    assert (first.t, second.t) == (0.5, 1.0)
    promoted = [e["t"] for e in of(events, "promoted")]
    assert promoted[:2] == [0.6, 1.25]  # the backup at 0.6; then the first restart, due at 0.5 + 0.75
    assert all(not a.problems for a in account(events, 3))
