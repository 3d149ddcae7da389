"""The worker process: pull -> forward/backward -> push, asynchronously against all shards.

Each rank trains on its own disjoint share of the training set, reshuffled
every epoch from the run seed. `workers.slowdown[rank] = m` emulates slower
hardware: the worker sleeps (m - 1) x its measured compute time every step.
"""
from __future__ import annotations

import time

from psgd.config import ConfigError
from psgd.runtime.role import RoleContext
from psgd.wire.curve import client_curve
from psgd.core.sharding import layout_for_module
from psgd.tasks import build_model, load_task, worker_batches
from psgd.workers.client import Interrupted, PSClient
from psgd.workers.model_sync import ModelSync, select_device

__all__ = ["run_worker", "run_role"]


def require_addresses(cfg) -> list[str]:
    if isinstance(cfg.cluster.servers, int):
        raise ConfigError("cluster.servers", "this role needs the list of server host:port addresses")
    return list(cfg.cluster.servers)


def make_client(cfg, layout, rank: int, role: str, should_stop=None) -> PSClient:
    c = cfg.cluster
    return PSClient(require_addresses(cfg), layout, rank=rank, role=role,
                    request_timeout_s=c.request_timeout_s, max_retries=c.max_retries,
                    heartbeat_s=c.heartbeat_s, encoding=cfg.wire.encoding, topk_ratio=cfg.wire.topk_ratio,
                    max_message_bytes=cfg.wire.max_message_mb << 20, should_stop=should_stop,
                    curve=client_curve(cfg))


def run_worker(ctx: RoleContext) -> int:
    cfg, rank = ctx.cfg, ctx.index
    if not 0 <= rank < cfg.cluster.workers:
        raise ConfigError("cluster.workers", f"no worker rank {rank} (there are {cfg.cluster.workers})")
    device = select_device(cfg.workers.device)
    task = load_task(cfg)
    model = build_model(cfg, task).to(device)
    layout = layout_for_module(model, cfg.cluster.num_servers)
    sync = ModelSync(model, layout, device, cfg.workers.pin_memory)
    batches = worker_batches(len(task.y_train), rank, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed)
    slowdown = cfg.workers.slowdown.get(rank, 1.0)
    client = make_client(cfg, layout, rank, "worker", ctx.should_stop)
    steps = 0
    try:
        sync.load(client.register())
        ctx.events.emit("ready", clock=client.clock, device=str(device))
        if not ctx.wait_for_start():
            return 0
        while client.clock < cfg.train.steps_per_worker and not ctx.should_stop():
            t0 = time.perf_counter()
            idx = next(batches)
            x, y = task.x_train[idx].to(device), task.y_train[idx].to(device)
            model.zero_grad(set_to_none=False)
            loss = task.loss(model(x), y)
            loss.backward()
            grads = sync.gradients()
            compute_s = time.perf_counter() - t0
            if slowdown > 1.0 and ctx.stop.wait((slowdown - 1.0) * compute_s):
                break
            t1 = time.perf_counter()
            sync.load(client.push_pull(grads))
            steps += 1
            ctx.events.emit("step", rank=rank, clock=client.clock, loss=loss.item(), compute_s=round(compute_s, 6),
                            comm_s=round(time.perf_counter() - t1, 6), step_s=round(time.perf_counter() - t0, 6),
                            gap=client.clock - min(client.min_clocks))
    except Interrupted:
        pass  # stopped while waiting for a shard: leave as below
    finally:
        client.leave()
        client.close()
    # pushes: distinct pushes every shard acknowledged (seqs used), across restarts of this rank.
    ctx.events.emit("done", rank=rank, clock=client.clock, steps=steps, pushes=client.seq, resends=client.resends,
                    bytes_sent=client.bytes_sent, fp32_bytes=client.encoder.fp32_bytes,
                    compression_ratio=round(client.encoder.compression_ratio, 6))
    return 0


def run_role(ctx: RoleContext) -> int:
    """The `worker` role. Raises ConfigError when the config names no servers."""
    try:
        require_addresses(ctx.cfg)
        return run_worker(ctx)
    finally:
        ctx.events.close()
