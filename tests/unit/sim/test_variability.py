"""Step-time variability on the virtual cluster: a persistent per-worker speed, a real run's
step times replayed, and simultaneous sends ordered by a seeded draw (psgd.sim.step_times,
psgd.sim.jitter)."""
import json
from collections import defaultdict

import numpy as np
import pytest

from psgd.config import ConfigError, load_config
from psgd.core.step_time import WorkerSpread
from psgd.orchestrate.launchers.sim import SimLauncher
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.jitter import SendOrder
from psgd.sim.step_times import StepTimes, load_recorded_steps
from psgd.sim.time_model import TimeModel

BASE = ["task.model=linear", "task.dataset=synthetic", "task.batch_size=8", "cluster.servers=1",
        "train.max_time_s=1e9", "eval.enabled=false", "sim.compute_ms=2"]


def run(sets, steps=20, executor_hook=None):
    cfg = load_config(None, BASE + [f"train.steps_per_worker={steps}", *sets])
    ex = Executor(cfg)
    if executor_hook:
        executor_hook(ex)
    events = []
    tm = TimeModel.from_config(cfg.sim, cfg.sim.compute_ms)
    engine = Engine(ex, tm, steps_per_worker=steps, max_time_s=cfg.train.max_time_s, eval_every_s=None,
                    emit=events.append)
    return engine.run(), events, tm


def compute_by_rank(events):
    out = defaultdict(list)
    for e in events:
        if e["event"] == "step":
            out[e["rank"]].append(e["compute_s"])
    return out


def test_a_workers_speed_is_one_draw_of_mean_one_for_its_whole_run():
    a, b = WorkerSpread(0.3, seed=5), WorkerSpread(0.3, seed=5)
    assert [a.factor(r) for r in range(8)] == [b.factor(r) for r in reversed(range(8))][::-1]
    assert WorkerSpread(0.0, seed=5).factor(3) == 1.0
    x = np.array([WorkerSpread(0.3, seed=0).factor(r) for r in range(20000)])
    assert x.mean() == pytest.approx(1.0, abs=0.01) and x.std() / x.mean() == pytest.approx(0.3, rel=0.05)
    # On the engine: every step of a rank takes compute_ms x that rank's factor, and ranks differ.
    _, events, tm = run(["cluster.workers=4", "sim.worker_spread=0.3"])
    spread = WorkerSpread(0.3, seed=0)
    for rank, times in compute_by_rank(events).items():
        assert times == [round(tm.compute_s * spread.factor(rank), 9)] * 20
    assert len({tuple(t) for t in compute_by_rank(events).values()}) == 4


def test_step_times_compose_base_speed_and_jitter():
    cfg = load_config(None, BASE + ["sim.compute_jitter=0.2", "sim.worker_spread=0.5"])
    tm = TimeModel.from_config(cfg.sim, 2.0)
    both = StepTimes(tm, seed=0)
    from psgd.core.step_time import ComputeJitter
    jitter, spread = ComputeJitter(0.2, 0), WorkerSpread(0.5, 0)
    for rank, step in [(0, 0), (3, 17), (1, 2000)]:
        assert both.compute_s(rank, step) == pytest.approx(2e-3 * spread.factor(rank) * jitter.factor(rank, step),
                                                           rel=1e-15)


def _recorded_run(tmp_path, times_by_rank):
    lines = []
    for rank, times in times_by_rank.items():
        lines += [{"t": i, "role": "worker", "index": rank, "event": "step", "rank": rank, "clock": i + 1,
                   "compute_s": c, "comm_s": 0.001, "step_s": c + 0.001} for i, c in enumerate(times)]
    lines.append({"t": 99, "role": "server", "index": 0, "event": "server_stats"})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))


def test_a_real_runs_step_times_drive_the_simulated_steps(tmp_path):
    recorded = {0: [0.010, 0.020, 0.030], 1: [0.005, 0.007]}
    _recorded_run(tmp_path, recorded)
    cfg = load_config(None, BASE + ["cluster.workers=3", "train.steps_per_worker=7", f"sim.step_times_from={tmp_path}",
                                    "sim.speedup=2", "cluster.launcher=sim"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = SimLauncher(cfg, run_dir).run()
    assert result.code == 0, result.reason
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    got = compute_by_rank(events)
    # Rank r replays recorded rank r mod 2, cycling, divided by the speed-up.
    for rank in range(3):
        times = recorded[rank % 2]
        assert got[rank] == [round(times[k % len(times)] / 2, 9) for k in range(7)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["sim_compute"]["step_times"]["ranks"] == 2 and summary["sim_compute"]["step_times"]["steps"] == 5


@pytest.mark.parametrize("content, why", [
    (None, "cannot read"),
    ("", "no worker step"),
    (json.dumps({"event": "step", "role": "worker", "rank": 0, "compute_s": 0.0}) + "\n", "every recorded compute_s is 0"),
    (json.dumps({"event": "step", "role": "worker", "rank": 0}) + "\n", "without an integer rank and a compute_s"),
    (json.dumps({"event": "step", "role": "worker", "rank": 0, "compute_s": -1}) + "\n", "not a finite time"),
])
def test_step_times_that_cannot_be_replayed_name_the_key(tmp_path, content, why):
    if content is not None:
        (tmp_path / "metrics.jsonl").write_text(content)
    with pytest.raises(ConfigError, match=why) as err:
        load_recorded_steps(str(tmp_path), ".")
    assert err.value.key == "sim.step_times_from"


def test_the_send_order_is_a_seeded_draw_per_step():
    order = SendOrder(seed=3)
    assert order.ranks(range(8), 5) == SendOrder(seed=3).ranks(range(8), 5)
    assert sorted(order.ranks(range(8), 5)) == list(range(8))
    assert len({tuple(order.ranks(range(8), step)) for step in range(20)}) > 10
    assert order.ranks(range(8), 5) != SendOrder(seed=4).ranks(range(8), 5)


def _late_ranks_per_clock(seed):
    late = defaultdict(set)

    def hook(ex):
        serve = ex.serve_push

        def recording(push):
            counters = ex.shards[push.shard].counters
            before = counters["push_late"]
            replies = serve(push)
            if counters["push_late"] > before:  # the shard counted this push late
                late[push.clock].add(push.rank)
            return replies
        ex.serve_push = recording
    run(["cluster.workers=8", "consistency.mode=bsp", "consistency.backup_workers=2", f"run.seed={seed}",
         "sim.compute_jitter=0"], steps=40, executor_hook=hook)
    return late


def test_bsp_backup_workers_in_lockstep_do_not_drop_the_same_ranks_every_clock():
    late = _late_ranks_per_clock(seed=0)
    assert len(late) >= 30 and all(len(r) == 2 for r in late.values())  # two late at (almost) every clock
    assert len({frozenset(r) for r in late.values()}) > 5    # not the same two every time
    assert set().union(*late.values()) == set(range(8))      # every rank is late sometimes
    assert late == _late_ranks_per_clock(seed=0)             # and the same config and seed: the same ones
