"""The evaluator: pulls the parameters on a timer (it has no clock and never
waits on the consistency mode), evaluates the test set and logs accuracy
against wall time and updates. The timer keeps a fixed period from start to
start (scoring time does not stretch it) and each evaluation is stamped with
the time of its pull, so time to target is resolved to `eval.every_s`. On stop it evaluates once more and writes the
final parameters as model.pt (a state_dict the user's model loads).

`evaluate_once` backs `psgd eval`: one pull from running servers, one evaluation.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import torch

from psgd.config import Config
from psgd.core.sharding import layout_for_module
from psgd.runtime.event_names import Event
from psgd.runtime.files import atomic_write
from psgd.runtime.role import RoleContext, RoleFailed
from psgd.tasks import build_model, load_task
from psgd.workers.client import Interrupted, PSClient, RemoteError, RequestFailed
from psgd.workers.client_factory import ClientSettings
from psgd.workers.model_sync import ModelSync
from psgd.workers.param_snapshot import SnapshotEvaluator

__all__ = ["Evaluator", "evaluate_servers", "next_deadline", "run_evaluator", "run_role"]


def next_deadline(deadline: float, period: float, now: float) -> float:
    """The start of the next evaluation after the one due at `deadline`: one
    period later, or now when scoring overran (missed ticks are skipped, not
    caught up in a burst)."""
    return max(deadline + period, now)


class Evaluator:
    """Pulls parameters from the shards into a CPU copy of the model and scores it."""

    def __init__(self, cfg, should_stop=None, run_dir=None):
        self.cfg = cfg
        client_settings = ClientSettings.from_config(cfg)  # fails here, before the test set is loaded
        self.interruptible = True  # False for the final evaluation, which must finish
        outer = should_stop or (lambda: False)
        self.task = load_task(cfg, run_dir, splits=("test",))  # the evaluator never needs the train split
        self.model = build_model(self.cfg, self.task)
        self.layout = layout_for_module(self.model, cfg.cluster.num_servers)
        self.sync = ModelSync(self.model, self.layout, torch.device("cpu"))
        self.client: PSClient = client_settings.connect(self.layout, 0, "evaluator",
                                                        lambda: self.interruptible and outer())

    def connect(self) -> None:
        self.sync.load(self.client.register())

    def evaluate(self) -> dict:
        self.sync.load(self.client.pull())
        accuracy, loss = self.task.evaluate(self.model)
        # Every update reaches every shard, so the furthest shard's version counts the
        # run's updates (the shards differ only by the pushes in flight during the pull).
        return {"accuracy": accuracy, "test_loss": loss, "updates": max(self.client.versions),
                "versions": list(self.client.versions)}

    def save(self, path: Path) -> None:
        state = self.model.state_dict()
        atomic_write(path, lambda f: torch.save(state, f), fsync=False)

    def close(self) -> None:
        self.client.leave(timeout_s=1.0)  # the shards let go of this connection's segment now
        self.client.close()


def run_evaluator(ctx: RoleContext) -> int:
    cfg = ctx.cfg
    if not cfg.consistency.mode.on_servers:
        ev = SnapshotEvaluator(cfg, ctx.run_dir)  # no servers: read rank 0's published parameters
    else:
        ev = Evaluator(cfg, ctx.should_stop, ctx.run_dir)
    target = cfg.train.target_accuracy
    try:
        ev.connect()
        ctx.events.emit(Event.READY)
        if not ctx.wait_for_start():
            return 0
        reached = False
        deadline = time.monotonic() + cfg.eval.every_s
        while not ctx.stop.wait(max(0.0, deadline - time.monotonic())) and not ctx.orphaned():
            pulled_at = ctx.events.now()
            result = ev.evaluate()
            ctx.events.emit(Event.EVAL, at=pulled_at, **result)
            deadline = next_deadline(deadline, cfg.eval.every_s, time.monotonic())
            if target is not None and not reached and result["accuracy"] >= target:
                reached = True
                ctx.events.emit(Event.TARGET_REACHED, accuracy=result["accuracy"])
    except Interrupted:
        pass
    # Final evaluation after the launcher stopped the workers; servers are still up.
    ev.interruptible = False
    try:
        pulled_at = ctx.events.now()
        result = ev.evaluate()
        ctx.events.emit(Event.EVAL, at=pulled_at, final=True, **result)
        if ctx.run_dir is not None:
            ev.save(ctx.run_dir / "model.pt")
    except (RequestFailed, RemoteError) as exc:
        ctx.events.emit(Event.ERROR, reason=f"final evaluation failed: {exc}")
        return 1
    finally:
        ev.close()
    return 0


def evaluate_servers(cfg: Config, save: Optional[Path] = None) -> dict:
    """`psgd eval`: pull what the running servers hold and score it on the test
    set once; optionally save it as a state_dict. Raises ConfigError without
    server addresses and RoleFailed when the servers cannot be reached."""
    torch.set_num_threads(cfg.run.threads)
    ev = Evaluator(cfg)
    try:
        ev.connect()
        result = ev.evaluate()
        if save:
            ev.save(save)
    except (RequestFailed, RemoteError) as exc:
        raise RoleFailed(str(exc)) from None
    finally:
        ev.close()
    return result


def run_role(ctx: RoleContext) -> int:
    """The `evaluator` role: score the servers' parameters on a timer."""
    try:
        return run_evaluator(ctx)
    finally:
        ctx.events.close()
