"""The exact-trajectory oracles: single-process SGD (what BSP must equal) and GEO-SGD, for the
simulator's exactness tests (tests/unit/sim) and the real shards' (tests/e2e/test_shard_consistency.py)."""
import torch

from psgd.config import load_config
from psgd.tasks import build_model, load_task, worker_batches

STEPS = 30


def cfg_for(mode, workers, **over):
    sets = ["task.model=mlp", "task.dataset=digits", "task.batch_size=16", "optimizer.lr=0.1",
            "cluster.servers=2", f"cluster.workers={workers}", f"consistency.mode={mode}",
            f"train.steps_per_worker={STEPS}", "eval.enabled=false", "sim.compute_ms=2"]
    return load_config(None, sets + [f"{k}={v}" for k, v in over.items()])


def reference_sgd(cfg, steps, task=None, lr=None):
    """Single-process SGD on the concatenation of every worker's batch of each step
    (`task`: the loaded task, else loaded here; `lr`: else the config's)."""
    task = load_task(cfg) if task is None else task
    model = build_model(cfg, task)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optimizer.lr if lr is None else lr)
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


def reference_geo(cfg, steps, orders):
    """GEO-SGD as the algorithm states it, for workers in lock-step: every worker takes its
    round of plain SGD from where its last push left the servers; then, rank by rank in
    `orders[round]` (the order the simulator served pushes that arrived together), the servers
    subtract the worker's delta at its share outer_lr / workers and the worker starts again
    from the result."""
    task = load_task(cfg)
    model = build_model(cfg, task)
    w, h = cfg.cluster.workers, cfg.local.steps
    theta = [p.detach().clone() for p in model.parameters()]
    starts = [[t.clone() for t in theta] for _ in range(w)]
    batches = [worker_batches(len(task.y_train), r, w, cfg.task.batch_size, cfg.run.seed) for r in range(w)]
    rounds = [h] * (steps // h) + ([steps % h] if steps % h else [])  # the last, shorter round too
    for n, order in zip(rounds, orders, strict=True):
        ends = []
        for k in range(w):
            with torch.no_grad():
                for p, s in zip(model.parameters(), starts[k]):
                    p.copy_(s)
            opt = torch.optim.SGD(model.parameters(), lr=cfg.optimizer.lr)
            for _ in range(n):
                idx = next(batches[k])
                opt.zero_grad()
                task.loss(model(task.x_train[idx]), task.y_train[idx]).backward()
                opt.step()
            ends.append([p.detach().clone() for p in model.parameters()])
        for k in order:
            for t, s, e in zip(theta, starts[k], ends[k]):
                t.sub_(s - e, alpha=cfg.local.outer_lr / w)
            starts[k] = [t.clone() for t in theta]
    with torch.no_grad():
        for p, t in zip(model.parameters(), theta):
            p.copy_(t)
    return model


def reference_on_replies(cfg, steps, encoding):
    """One worker's plain SGD as the shards see it when their replies travel in `encoding`
    (wire.compression.replies): every step's gradient is computed on the shards' parameters
    encoded and decoded (the registration's too), and applied to the exact ones. Returns the
    shards' flat parameters."""
    from psgd.core.sharding import layout_for_module
    from psgd.wire.replies import ReplyEncoder, decode_reply
    task = load_task(cfg)
    model = build_model(cfg, task)
    layout = layout_for_module(model, cfg.cluster.num_servers)
    params = list(model.parameters())
    exact = layout.flatten([p.detach() for p in params])
    batches = worker_batches(len(task.y_train), 0, 1, cfg.task.batch_size, cfg.run.seed)
    for _ in range(steps):
        read = []
        for flat in exact:
            if encoding == "none":  # the parameters as they are
                read.append(flat.clone())
                continue
            enc = ReplyEncoder(encoding).encode(flat, 0)
            read.append(decode_reply(encoding, flat.numel(), enc.scale, torch.empty(flat.numel()), frames=enc.frames))
        with torch.no_grad():
            layout.unflatten(read, params)
        idx = next(batches)
        model.zero_grad()
        task.loss(model(task.x_train[idx]), task.y_train[idx]).backward()
        for flat, grad in zip(exact, layout.flatten([p.grad for p in params])):
            flat.add_(grad, alpha=-cfg.optimizer.lr)
    return exact


def run_virtual(cfg):
    """(executor, result, events, engine) of `cfg` run on the virtual cluster, with the time
    model the simulator's launcher builds (each shard's own push codecs)."""
    from psgd.sim import Engine, Executor, TimeModel
    events = []
    ex = Executor(cfg)
    engine = Engine(ex, TimeModel.for_run(cfg, cfg.sim.compute_ms, ex.plans),
                    steps_per_worker=cfg.train.steps_per_worker, max_time_s=cfg.train.max_time_s,
                    eval_every_s=cfg.eval.every_s if cfg.eval.enabled else None, emit=events.append)
    return ex, engine.run(), events, engine
