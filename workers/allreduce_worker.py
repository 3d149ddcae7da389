"""The all-reduce baseline: synchronous data parallelism with torch.distributed.

Each rank wraps the task's model in DistributedDataParallel (gloo on CPU,
nccl on CUDA), trains on the same per-rank data share as a parameter-server
worker, and applies the averaged gradient with psgd.core.rules.updater.ShardUpdater on one
flat parameter vector, the exact update maths of a BSP shard. With plain SGD
an allreduce run and a bsp run of the same config and seed therefore follow
the same trajectory.

Emulated stragglers (`workers.slowdown`, `delay`, `transient`:
psgd.core.heterogeneity) sleep inside DDP's communication hook: when the
rank's last gradient bucket is ready (local compute done), it sleeps the
model's extra time before that bucket's all-reduce, just as a PS worker
sleeps before its push. Rank 0 publishes its parameters for the
evaluator (workers/param_snapshot.py). Ranks agree to stop (SIGTERM, time
limit) through a one-element all-reduce every few steps, so no rank is left
waiting in a collective.
"""
from __future__ import annotations

import datetime
import gc
import time
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from psgd.config import ConfigError
from psgd.core.heterogeneity import straggler_for
from psgd.core.lr_scaling import scaled_optimizer
from psgd.core.rules.updater import ShardUpdater
from psgd.runtime.devices import dist_backend, wait_for_device
from psgd.runtime.event_names import Event
from psgd.runtime.role import RoleContext
from psgd.tasks import build_model, load_task
from psgd.tasks.loaders import train_loader
from psgd.workers.device_time import DeviceClock
from psgd.workers.model_sync import select_device
from psgd.workers.param_snapshot import SnapshotPublisher

__all__ = ["run_allreduce_worker", "run_role"]

STOP_CHECK_EVERY = 10   # steps between stop votes (a tiny all-reduce each)
COLLECTIVE_TIMEOUT_S = 60.0  # a dead peer becomes an error, not a hang


class _SlowdownHook:
    """DDP comm hook: plain averaging all-reduce, preceded on the last bucket
    of a step by the wait for the stated device time (workers.device_ms) and
    the straggler's sleep. Records the step's compute time."""

    def __init__(self, straggler, device: torch.device, device_clock: Optional[DeviceClock] = None):
        self.straggler, self.device, self.device_clock = straggler, device, device_clock
        self.started = time.perf_counter()   # reset when training starts
        self.step_start = 0.0
        self.compute_s = 0.0
        self.slept_s = 0.0
        self.steps = -1  # the step under way (0-based)

    def start_step(self) -> None:
        self.step_start = time.perf_counter()
        self.compute_s = self.slept_s = 0.0
        self.steps += 1

    def communicate(self, state, bucket):  # unannotated: DDP rejects string annotations
        if bucket.is_last():
            wait_for_device(self.device)  # backward's kernels have run: their time, not their launches
            self.compute_s = (time.perf_counter() - self.step_start if self.device_clock is None
                              else self.device_clock.hold(self.step_start, self.steps))
            if self.straggler.active:
                self.slept_s = self.straggler.extra_s(self.compute_s, self.step_start - self.started)
                time.sleep(self.slept_s)
        return allreduce_hook(state, bucket)


def _init_group(cfg, rank: int, device: torch.device) -> None:
    backend = dist_backend(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's communicators and barrier() use the current device
    c = cfg.cluster
    if not c.allreduce_port:
        raise ConfigError("cluster.allreduce_port", "allreduce mode needs a rendezvous port (psgd launch picks one)")
    dist.init_process_group(backend, init_method=f"tcp://{c.host}:{c.allreduce_port}", rank=rank,
                            world_size=c.workers, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))


def _all_agree_to_stop(wants_stop: bool, device: torch.device) -> bool:
    # On the group's device: NCCL reduces CUDA tensors only (a CPU flag has no backend there).
    flag = torch.tensor([1 if wants_stop else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def run_allreduce_worker(ctx: RoleContext) -> int:
    cfg, rank = ctx.cfg, ctx.index
    if cfg.consistency.mode.on_servers:
        raise ConfigError("consistency.mode", f"the all-reduce worker needs mode allreduce, got {cfg.consistency.mode}")
    if not 0 <= rank < cfg.cluster.workers:
        raise ConfigError("cluster.workers", f"no worker rank {rank} (there are {cfg.cluster.workers})")
    device = select_device(cfg.workers.device)
    if device.type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
    task = load_task(cfg, ctx.run_dir, splits=("train",))
    model = build_model(cfg, task).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    flat = parameters_to_vector(params).detach().clone()
    rule = ShardUpdater(scaled_optimizer(cfg), flat)
    batches = train_loader(task.train_data(), rank, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed,
                           cfg.workers.loader.num_workers, cfg.workers.loader.pin_memory and device.type == "cuda")
    hook = _SlowdownHook(straggler_for(cfg.workers, rank, cfg.run.seed), device, DeviceClock.from_config(cfg, rank))
    publisher = SnapshotPublisher(ctx.run_dir) if rank == 0 else None

    _init_group(cfg, rank, device)
    steps = 0
    ddp = None
    try:
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        ddp.register_comm_hook(None, hook.communicate)
        if publisher is not None:
            publisher.maybe_publish(flat, 0, force=True)
        ctx.events.emit(Event.READY, clock=0, device=str(device), backend=dist.get_backend())
        started = ctx.wait_for_start()
        if not _all_agree_to_stop(not started, device):
            hook.started = time.perf_counter()
            steps = _train(ctx, ddp, task, batches, params, flat, rule, hook, publisher)
        dist.barrier()  # nobody tears down while a peer may still be in a collective
    finally:
        # DDP's reducer must go before its process group: the other order can
        # abort the interpreter at exit ("terminate called without an active exception").
        del ddp
        gc.collect()
        dist.destroy_process_group()
    if rank == 0:
        # The summary reads staleness and clock gaps from "server_stats"; in
        # all-reduce every gradient is applied fresh, so both are 0.
        n = steps * cfg.cluster.workers
        ctx.events.emit(Event.SERVER_STATS, final=True, version=steps, counters={"updates": steps},
                        staleness_hist={"0": n} if n else {}, clock_gap_hist={"0": n} if n else {})
    ctx.events.emit(Event.DONE, rank=rank, clock=steps, steps=steps, resends=0,
                    bytes_sent=steps * flat.numel() * flat.element_size())
    return 0


def _train(ctx, ddp, task, batches, params, flat, rule, hook, publisher) -> int:
    cfg, rank, device = ctx.cfg, ctx.index, flat.device
    steps = 0
    while steps < cfg.train.steps_per_worker:
        if steps % STOP_CHECK_EVERY == 0 and steps and _all_agree_to_stop(ctx.should_stop(), device):
            break
        hook.start_step()
        x, y = next(batches)
        x, y = task.inputs(x).to(device), task.targets(y).to(device)
        ddp.zero_grad(set_to_none=False)
        loss = task.loss(ddp(x), y)
        loss.backward()  # the comm hook averages gradients across ranks
        with torch.no_grad():
            grad = torch.cat([p.grad.reshape(-1) for p in params])
            rule.apply(flat, grad, 0)
            vector_to_parameters(flat, params)
        steps += 1
        step_s = time.perf_counter() - hook.step_start
        if publisher is not None:
            publisher.maybe_publish(flat, steps)
        ctx.events.emit(Event.STEP, rank=rank, clock=steps, loss=float(loss.detach()), compute_s=round(hook.compute_s, 6),
                        comm_s=round(step_s - hook.compute_s - hook.slept_s, 6), step_s=round(step_s, 6), gap=0)
    if publisher is not None:
        publisher.maybe_publish(flat, steps, force=True)
    return steps


def run_role(ctx: RoleContext) -> int:
    """The `allreduce` role: one rank of the all-reduce baseline."""
    try:
        return run_allreduce_worker(ctx)
    finally:
        ctx.events.close()
