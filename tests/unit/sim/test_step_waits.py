"""A simulated worker's step records how long its pull stayed parked (`wait_s`), from the
shards' replies, as a real worker does: summed over the steps, exactly the shard's own total."""
import pytest

from psgd.config import load_config
from psgd.sim import Engine, Executor, TimeModel


def _run(*sets):
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic", "task.batch_size=8", "cluster.workers=3",
                             "train.steps_per_worker=10", "eval.every_s=1e9", "sim.compute_ms=2",
                             "workers.slowdown={2: 3.0}", "train.max_time_s=1e9", "train.target_accuracy=null",
                             *sets])
    events: list[dict] = []
    ex = Executor(cfg)
    Engine(ex, TimeModel.for_run(cfg, cfg.sim.compute_ms, ex.plans), steps_per_worker=cfg.train.steps_per_worker,
           max_time_s=cfg.train.max_time_s, eval_every_s=cfg.eval.every_s, emit=events.append).run()
    steps = [e for e in events if e["event"] == "step"]
    waited = [sum(e["wait_s"] for e in steps if e["rank"] == r) for r in range(3)]
    return steps, waited, [svc.waits.totals()["held_s"] for svc in ex.services]


def test_under_bsp_the_steps_waits_sum_to_what_the_shard_held():
    steps, waited, (held,) = _run("consistency.mode=bsp", "cluster.servers=1")
    assert waited == pytest.approx(held, abs=1e-8 * len(steps))  # each step's wait rounded to 1e-9 s
    assert waited[0] > 0 and waited[1] > 0 and waited[2] == 0.0  # the fast ranks wait for the slow one
    assert all(0 <= e["wait_s"] <= e["comm_s"] for e in steps)


def test_a_pull_waits_for_every_shard_so_a_step_counts_the_longest_hold():
    _, waited, held = _run("consistency.mode=bsp", "cluster.servers=2")
    for rank in range(3):
        assert waited[rank] >= max(h[rank] for h in held) - 1e-8  # the sum of each pull's longest hold


def test_under_asp_no_step_waits():
    steps, waited, _ = _run("consistency.mode=asp", "cluster.servers=2")
    assert waited == [0.0, 0.0, 0.0] and len(steps) == 30
