"""The servers' consistency rules, driven by the simulator's clock."""
from psgd.config import load_config
from psgd.sim import simulate

STEPS = 30


def cfg_for(mode, **over):
    sets = ["task.model=linear", "task.dataset=synthetic", "task.batch_size=8", "cluster.servers=2",
            "cluster.workers=4", f"consistency.mode={mode}", f"train.steps_per_worker={STEPS}",
            "eval.enabled=false", "sim.compute_ms=2", "workers.slowdown={1: 4.0}", "train.max_time_s=1e9"]
    return load_config(None, sets + [f"{k}={v}" for k, v in over.items()])


def test_ssp_holds_its_bound_with_a_4x_straggler_and_asp_drifts_further():
    ssp, _ = simulate(cfg_for("ssp", **{"consistency.staleness": 2}), 2.0)
    asp, _ = simulate(cfg_for("asp"), 2.0)
    for shard in ssp.shards:
        assert shard.clock_gaps.max == 2  # answered once the slowest is at c - bound; the straggler makes it bind
    assert max(s.clock_gaps.max for s in asp.shards) > 3


def test_bsp_backup_worker_drops_the_straggler_and_keeps_one_update_per_clock():
    ex, _ = simulate(cfg_for("bsp", **{"consistency.backup_workers": 1}), 2.0)
    for shard in ex.shards:
        assert shard.counters["late_dropped"] > 0
        assert shard.version == shard.bsp.step


def test_a_dropped_straggler_counts_the_clocks_it_was_moved_past_as_a_real_worker_does():
    # psgd.Optimizer.steps_taken is the worker's clock: a BSP straggler whose late clocks were
    # dropped jumps ahead and stops at the budget's clock, having computed fewer gradients.
    ex, result = simulate(cfg_for("bsp", **{"consistency.backup_workers": 1}), 2.0)
    straggler, others = ex.workers[1], [w for w in ex.workers if w.rank != 1]
    assert straggler.clock == STEPS and straggler.steps_taken == STEPS
    assert straggler.steps < STEPS // 2  # 4x slower: it computed about one clock in four
    assert all(w.steps == w.clock == STEPS for w in others)
    assert result.steps == straggler.steps + 3 * STEPS
    assert result.end_s < STEPS * 4 * 2e-3 / 2  # not the 4x budget of 30 full straggler steps
