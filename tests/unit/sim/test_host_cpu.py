"""The CPU the time model charges each role with hosts: reported as a real run reports its processes' CPU
(cpu_s in a worker's done event and a shard's stats, role_cpu_s in the summary), and the request probe's
costs beyond a request's parts charged where a real process spends them."""
from dataclasses import replace

import pytest

from psgd.config import Role, load_config
from psgd.orchestrate.records.summary import summarize
from psgd.sim import Engine, Executor, TimeModel
from psgd.sim.compute import resolve_compute
from psgd.sim.host_profile import Linear, load_host_profile

TESTBED = "benchmarks/sim-validation/testbed.yaml"
STEPS = 3


def _run(*extra: str):
    cfg = load_config(TESTBED, ["cluster.workers=2", "cluster.servers=2", "consistency.mode=bsp",
                                f"train.steps_per_worker={STEPS}", "eval.enabled=false", "train.target_accuracy=null",
                                "sim.hosts={box: {cores: 2}}", *extra])
    events: list[dict] = []
    ex = Executor(cfg)
    engine = Engine(ex, TimeModel.for_run(cfg, resolve_compute(cfg, ex.task).compute_ms, ex.plans),
                    steps_per_worker=STEPS, max_time_s=cfg.train.max_time_s, eval_every_s=None, emit=events.append)
    engine.run()
    return cfg, engine, events


def test_each_role_reports_the_cpu_charged_to_it_and_the_charges_are_the_cores_work():
    cfg, engine, events = _run()
    clock, model = engine.hosts, engine.hosts.model
    done = {e["rank"]: e for e in events if e["event"] == "done"}
    stats = {e["index"]: e for e in events if e["event"] == "server_stats"}
    per_step = model.host_part_s + clock.push_out_s + sum(clock.reply_in_s) + clock.after_replies_s + model.loop_s
    for rank in (0, 1):
        assert done[rank]["cpu_s"] == pytest.approx(STEPS * per_step, rel=1e-6)
    for shard in (0, 1):  # every push served and every reply sent, one per worker step, and the final evaluation's
        served = 2 * STEPS * (clock.push_in_s[shard] + clock.reply_out_s[shard]) + clock.reply_out_s[shard]
        assert stats[shard]["cpu_s"] == pytest.approx(served + engine.wakes[shard] * clock.wake_s, rel=1e-6)
    assert sum(model.charged.values()) == pytest.approx(sum(c.busy_s for c in model.cores))
    summary = summarize(cfg, events, wall_time_s=1.0, clock="simulated")
    assert summary["role_cpu_s"] == pytest.approx({str(Role.WORKER): sum(d["cpu_s"] for d in done.values()),
                                                   str(Role.SERVER): sum(s["cpu_s"] for s in stats.values())}, abs=1e-3)


def test_a_run_without_hosts_reports_no_cpu():
    cfg = load_config(TESTBED, ["cluster.workers=2", "train.steps_per_worker=2", "eval.enabled=false",
                                "train.target_accuracy=null"])
    events: list[dict] = []
    ex = Executor(cfg)
    Engine(ex, TimeModel.for_run(cfg, resolve_compute(cfg, ex.task).compute_ms, ex.plans), steps_per_worker=2,
           max_time_s=cfg.train.max_time_s, eval_every_s=None, emit=events.append).run()
    assert not any("cpu_s" in e for e in events)
    assert summarize(cfg, events, wall_time_s=1.0)["role_cpu_s"] is None


def _profiles(tmp_path):
    """The shipped profile without the request probe's keys (a profile measured before it), and with them."""
    plain = replace(load_host_profile("cpu-reference"), request_client=None, request_shard=None,
                    request_shard_wake_us=0.0, worker_step_extra=None, worker_exchange_extra=None)
    probed = replace(plain, request_client=Linear(300.0, 2.0), request_client_send_share=0.25,
                     request_shard=Linear(150.0, 4.0), request_shard_wake_us=500.0)
    paths = tmp_path / "plain.json", tmp_path / "probed.json"
    for profile, path in zip((plain, probed), paths):
        path.write_text(profile.to_json())
    return probed, paths


def test_a_requests_cost_beyond_its_parts_is_charged_at_each_end_where_it_is_spent(tmp_path):
    probed, (plain_path, path) = _profiles(tmp_path)
    client, shard = probed.request_client, probed.request_shard
    _, plain, plain_events = _run(f"sim.host_profile={plain_path}")
    _, extra, events = _run(f"sim.host_profile={path}")
    model = 4 * extra.hosts.total  # the worker's part: once per step, over the whole model
    assert extra.hosts.push_out_s == pytest.approx(plain.hosts.push_out_s + 0.25 * client.seconds(model))
    assert extra.hosts.after_replies_s == pytest.approx(0.75 * client.seconds(model)) and plain.hosts.after_replies_s == 0
    for s, n in enumerate(extra.ex.layout.shard_sizes):  # each shard's by its own part
        assert extra.hosts.push_in_s[s] == pytest.approx(plain.hosts.push_in_s[s] + shard.seconds(4 * n))
    # a push that finds its shard asleep also pays the wake-up: BSP's first push of each clock does here
    served = [sum(e["busy_s"] for e in evs if e["event"] == "server_stats") for evs in (plain_events, events)]
    pushes = 2 * 2 * STEPS
    assert served[1] - served[0] > pushes * shard.seconds(0) + 500e-6
    assert extra.result.end_s > plain.result.end_s


def test_a_profile_file_keeps_the_request_costs(tmp_path):
    probed, (_, path) = _profiles(tmp_path)
    assert load_host_profile(str(path)) == probed


def test_the_worker_loop_probes_extras_are_charged_in_the_step_beside_the_device_and_in_the_exchange(tmp_path):
    plain = replace(load_host_profile("cpu-reference"), worker_step_extra=None, worker_exchange_extra=None)
    probed = replace(plain, worker_step_extra=Linear(500.0, 2.0), worker_exchange_extra=Linear(200.0, 4.0))
    paths = tmp_path / "plain.json", tmp_path / "probed.json"
    for profile, path in zip((plain, probed), paths):
        path.write_text(profile.to_json())
    _, before, _ = _run(f"sim.host_profile={paths[0]}", "workers.device_ms=5")
    _, after, _ = _run(f"sim.host_profile={paths[1]}", "workers.device_ms=5")
    model = 4 * after.hosts.total
    share = plain.request_client_send_share
    assert after.hosts.model.host_part_s == pytest.approx(before.hosts.model.host_part_s
                                                          + probed.worker_step_extra.seconds(model))
    exchange = probed.worker_exchange_extra.seconds(model)
    assert after.hosts.push_out_s == pytest.approx(before.hosts.push_out_s + share * exchange)
    assert after.hosts.after_replies_s == pytest.approx(before.hosts.after_replies_s + (1 - share) * exchange)


def test_a_shards_thread_sends_a_requests_reply_before_it_takes_the_next_waiting_request():
    # two equal ASP workers push together: the second waits; a real shard answers the first, then serves it
    cfg = load_config(TESTBED,
                      ["cluster.workers=2", "cluster.servers=1", "consistency.mode=asp", "train.steps_per_worker=4",
                       "eval.enabled=false", "train.target_accuracy=null", "sim.hosts={box: {cores: 2}}",
                       "sim.compute_jitter=0"])
    ex = Executor(cfg)
    engine = Engine(ex, TimeModel.for_run(cfg, resolve_compute(cfg, ex.task).compute_ms, ex.plans),
                    steps_per_worker=4, max_time_s=cfg.train.max_time_s, eval_every_s=None, emit=lambda e: None)
    model, booked = engine.hosts.model, []
    book = model.run

    def recorded(role, index, ready, busy_s):
        if role is Role.SERVER:
            booked.append("reply" if busy_s == engine.hosts.reply_out_s[index] else "serve")
        return book(role, index, ready, busy_s)

    model.run = recorded
    engine.run()
    assert engine.arrivals[0] - engine.wakes[0] > 0  # some pushes found the shard busy and waited
    assert booked[:-1] == ["serve", "reply"] * (len(booked) // 2)  # the last: the final evaluation's reply
