"""The simulator applies the servers' rules exactly: BSP with plain SGD is
single-process SGD on the W x B batch; ASP with one worker is a plain loop."""
import torch

from psgd.config import load_config
from psgd.sim import simulate
from psgd.tasks import build_model, load_task, worker_batches

STEPS = 30


def cfg_for(mode, workers, **over):
    sets = ["task.model=mlp", "task.dataset=digits", "task.batch_size=16", "optimizer.lr=0.1",
            "cluster.servers=2", f"cluster.workers={workers}", f"consistency.mode={mode}",
            f"train.steps_per_worker={STEPS}", "eval.enabled=false", "sim.compute_ms=2"]
    return load_config(None, sets + [f"{k}={v}" for k, v in over.items()])


def reference_sgd(cfg, steps):
    """Single-process SGD on the concatenation of every worker's batch of each step."""
    task = load_task(cfg)
    model = build_model(cfg, task)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optimizer.lr)
    batches = [worker_batches(len(task.y_train), r, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed)
               for r in range(cfg.cluster.workers)]
    for _ in range(steps):
        idx = torch.cat([next(b) for b in batches])
        opt.zero_grad()
        task.loss(model(task.x_train[idx]), task.y_train[idx]).backward()
        opt.step()
    return model


def assert_servers_equal(ex, model, atol):
    expected = ex.layout.flatten([p.detach() for p in model.parameters()])
    start = ex.layout.flatten([p.detach() for p in build_model(ex.cfg, ex.task).parameters()])
    for s, shard in enumerate(ex.shards):
        assert not torch.allclose(shard.params, start[s], atol=1e-3)  # it did train
        torch.testing.assert_close(shard.params, expected[s], rtol=0, atol=atol)


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
