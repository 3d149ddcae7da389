"""The worker process: pull -> forward/backward -> push through psgd.Optimizer, against all shards at once.

Each rank trains on its own disjoint share of the training set, reshuffled
every epoch from the run seed. Slower hardware is emulated by sleeping after
each step's compute (`workers.slowdown`, `workers.delay`, `workers.transient`:
psgd.core.heterogeneity); a stated device time (`workers.device_ms`) is waited
out first, so a straggler's delay is a multiple of the device time.
"""
from __future__ import annotations

import time

from psgd.config import ConfigError
from psgd.core.heterogeneity import straggler_for
from psgd.runtime.devices import wait_for_device
from psgd.runtime.event_names import Event
from psgd.runtime.host import CpuMeter, LoopCpu, host_fields
from psgd.runtime.role import RoleContext
from psgd.runtime.token import read_run_token
from psgd.runtime.user_errors import user_code
from psgd.tasks import build_model, load_task
from psgd.tasks.loaders import train_loader
from psgd.workers.client import Interrupted
from psgd.workers.model_sync import select_device
from psgd.workers.optimizer import Optimizer
from psgd.workers.step import forward_backward

__all__ = ["run_worker", "run_role"]


def run_worker(ctx: RoleContext) -> int:
    """Trains through psgd.Optimizer, the class a user's own loop uses."""
    cfg, rank = ctx.cfg, ctx.index
    if not 0 <= rank < cfg.cluster.workers:
        raise ConfigError("cluster.workers", f"no worker rank {rank} (there are {cfg.cluster.workers})")
    device = select_device(cfg.workers.device)
    with user_code(f"dataset {cfg.task.dataset!r}"):
        task = load_task(cfg, ctx.run_dir, splits=("train",))
    with user_code(f"model {cfg.task.model!r}"):
        model = build_model(cfg, task).to(device)
    loader = cfg.workers.loader
    with user_code(f"the DataLoader of dataset {cfg.task.dataset!r}"):
        batches = train_loader(task.train_data(), rank, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed,
                               loader.num_workers, loader.pin_memory and device.type == "cuda")
    straggler = straggler_for(cfg.workers, rank, cfg.run.seed)
    try:
        opt = Optimizer(model, cfg, rank=rank, should_stop=ctx.should_stop,
                        token=read_run_token(ctx.run_dir))  # joins and loads the parameters
    except Interrupted:
        return 0  # stopped before the shards answered
    steps, cpu, phases = 0, None, None
    try:
        # A restarted worker under local updates cannot recover its inner optimizer's state: it says so.
        inner = {"inner_state": "fresh"} if opt.rounds is not None else {}
        ctx.events.emit(Event.READY, clock=opt.clock, device=str(device), **inner, **host_fields())
        if not ctx.wait_for_start():
            return 0
        started, cpu, phases = time.monotonic(), CpuMeter(), LoopCpu()
        while opt.steps_taken < cfg.train.steps_per_worker and not ctx.should_stop():
            phases.mark("loop")
            t0 = time.perf_counter()
            batch = next(batches)
            opt.zero_grad(set_to_none=False)
            loss = forward_backward(task, model, batch, device)  # as every simulated worker's step
            wait_for_device(device)  # the real kernels have run: their time, not their launches
            compute_s = opt.hold_device(t0, ctx.stop.wait)  # the stated device time, or the real compute if longer
            if straggler.active and ctx.stop.wait(straggler.extra_s(compute_s, time.monotonic() - started)):
                break
            phases.mark("step")
            t1, waited = time.perf_counter(), opt.client.pull_wait_s
            opt.step()
            phases.mark("exchange")
            steps += 1
            ctx.events.emit(Event.STEP, rank=rank, clock=opt.clock, loss=loss.item(), compute_s=round(compute_s, 6),
                            comm_s=round(time.perf_counter() - t1, 6), step_s=round(time.perf_counter() - t0, 6),
                            gap=opt.clock - opt.stats.slowest_clock,
                            wait_s=round(opt.client.pull_wait_s - waited, 6))  # parked on the shards, within comm_s
        phases.mark("loop")
        if opt.steps_taken >= cfg.train.steps_per_worker:
            opt.flush()  # local updates: the last, shorter round still reaches the shards
    except Interrupted:
        pass  # stopped while waiting for a shard: leave as below
    finally:
        opt.close()
    sent = opt.stats
    ctx.events.emit(Event.DONE, rank=rank, clock=sent.clock, steps=steps, pushes=sent.pushes, seqs=sent.seqs,
                    resends=sent.resends,
                    bytes_sent=sent.bytes_sent, peak_push_bytes=sent.peak_push_bytes, fp32_bytes=sent.fp32_bytes,
                    compression_ratio=round(sent.compression_ratio, 6), encode_s=round(sent.encode_s, 6),
                    pull_bytes=sent.pull_bytes, pull_fp32_bytes=sent.pull_fp32_bytes,
                    reply_decode_s=round(sent.reply_decode_s, 6), **(cpu.fields() if cpu is not None else {}),
                    **(phases.fields() if phases is not None else {}),
                    **(opt.rounds.done_fields() if opt.rounds is not None else {}))
    return 0


def run_role(ctx: RoleContext) -> int:
    """The `worker` role. Raises ConfigError when the config names no servers
    (psgd.Optimizer checks, through workers/client_factory.py)."""
    try:
        return run_worker(ctx)
    finally:
        ctx.events.close()
