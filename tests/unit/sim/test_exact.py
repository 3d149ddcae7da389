"""The simulator applies the servers' rules exactly: BSP with plain SGD is
single-process SGD on the W x B batch; ASP with one worker is a plain loop."""
import torch
from sgd_reference import STEPS, assert_servers_equal, cfg_for, reference_sgd

from psgd.sim import simulate


def test_bsp_sgd_equals_single_process_sgd_on_the_concatenated_batch():
    cfg = cfg_for("bsp", 3)
    ex, _ = simulate(cfg, cfg.sim.compute_ms)
    assert [s.version for s in ex.shards] == [STEPS, STEPS]
    assert_servers_equal(ex, reference_sgd(cfg, STEPS), atol=1e-5)  # tests/e2e/test_shard_consistency.py's


def test_asp_with_one_worker_equals_a_plain_loop():
    cfg = cfg_for("asp", 1)
    ex, _ = simulate(cfg, cfg.sim.compute_ms)
    assert [s.version for s in ex.shards] == [STEPS, STEPS]
    assert_servers_equal(ex, reference_sgd(cfg, STEPS), atol=0)


def test_allreduce_follows_the_bsp_trajectory(tmp_path):
    """The simulated all-reduce baseline and simulated BSP reach the same
    parameters (the real-process test's tolerance, tests/e2e/test_allreduce_worker.py)."""
    from psgd.sim.allreduce import AllReduceSim
    from psgd.sim.time_model import TimeModel
    cfg = cfg_for("allreduce", 3)
    ar = AllReduceSim(cfg, TimeModel.from_config(cfg.sim, cfg.sim.compute_ms))
    ar.run(STEPS, 1e9, None)
    bsp, _ = simulate(cfg_for("bsp", 3), cfg.sim.compute_ms)
    ar_state, bsp_state = ar.state_dict(), bsp.state_dict()
    for name, value in ar_state.items():
        torch.testing.assert_close(value, bsp_state[name], rtol=0, atol=1e-4, msg=f"{name} differs")
