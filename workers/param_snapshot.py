"""How the evaluator sees an all-reduce run's parameters (there are no servers).

Rank 0 publishes its flat parameter vector and update count to one file in
the run directory when the evaluator asks for it (by creating a request
file, which rank 0 checks with one stat() per step), once before training
and once at the end. So an evaluation sees parameters at most one step old,
as a PS evaluator's pull does. Writes go to a temporary file renamed into
place, so a reader never sees a partial snapshot; for the small models psgd
benchmarks, a publish costs well under a millisecond.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import torch

from psgd.runtime.files import atomic_write

__all__ = ["SNAPSHOT_FILE", "REQUEST_FILE", "SnapshotPublisher", "SnapshotEvaluator", "read_snapshot"]

SNAPSHOT_FILE = "allreduce_params.pt"
REQUEST_FILE = "allreduce_params.request"
POLL_S = 0.002


class SnapshotPublisher:
    """Rank 0's side. `maybe_publish` is cheap enough to call every step."""

    def __init__(self, run_dir: Optional[Path]):
        self.path = Path(run_dir) / SNAPSHOT_FILE if run_dir is not None else None
        self.request = Path(run_dir) / REQUEST_FILE if run_dir is not None else None
        self.seq = 0

    def maybe_publish(self, flat_params: torch.Tensor, updates: int, force: bool = False) -> bool:
        """Publish if the evaluator asked (or `force`); returns whether it did."""
        if self.path is None or not (force or self.request.exists()):
            return False
        self.request.unlink(missing_ok=True)  # before writing: a newer request is never lost
        self.seq += 1
        snapshot = {"params": flat_params.detach().cpu().clone(), "updates": int(updates), "seq": self.seq}
        atomic_write(self.path, lambda f: torch.save(snapshot, f), fsync=False)
        return True


def read_snapshot(run_dir: Path) -> Optional[dict]:
    """The latest snapshot {params, updates, seq}, or None before the first."""
    try:
        return torch.load(Path(run_dir) / SNAPSHOT_FILE, weights_only=True)
    except FileNotFoundError:
        return None


class SnapshotEvaluator:
    """The evaluator's parameter source in allreduce mode: same interface as
    psgd.workers.evaluator.Evaluator, but reads rank 0's published snapshot."""

    def __init__(self, cfg, run_dir: Optional[Path]):
        from psgd.tasks import build_model, load_task
        if run_dir is None:
            raise ValueError("evaluating an allreduce run needs --run-dir (rank 0 publishes there)")
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.interruptible = True
        self.task = load_task(cfg, run_dir, splits=("test",))
        self.model = build_model(cfg, self.task)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.updates = 0
        self.seq = 0
        self.wait_s = cfg.eval.every_s  # how long to wait for rank 0 to answer a request

    def connect(self) -> None:
        """Nothing to connect to; the snapshot may not exist yet."""

    def _fresh_snapshot(self) -> Optional[dict]:
        """Ask rank 0 for its current parameters; fall back to the latest
        snapshot if it does not answer in time (e.g. training has ended)."""
        if self.interruptible:
            # Only a snapshot newer than the one already there answers this request:
            # rank 0 takes the request before it writes, so the old one can still be read.
            latest = read_snapshot(self.run_dir)
            known = max(self.seq, int(latest["seq"]) if latest is not None else 0)
            request = self.run_dir / REQUEST_FILE
            request.touch()
            deadline = time.monotonic() + self.wait_s
            while time.monotonic() < deadline:
                if request.exists():  # not taken yet: a stat() is cheaper than a load
                    time.sleep(POLL_S)
                    continue
                snap = read_snapshot(self.run_dir)
                if snap is not None and snap["seq"] > known:
                    return snap
                time.sleep(POLL_S)
        return read_snapshot(self.run_dir)

    def evaluate(self) -> dict:
        """Blocks for at most eval.every_s while rank 0 publishes."""
        snap = self._fresh_snapshot()
        if snap is not None:
            flat, self.updates, self.seq = snap["params"], int(snap["updates"]), int(snap["seq"])
            with torch.no_grad():
                offset = 0
                for p in self.params:
                    p.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
        accuracy, loss = self.task.evaluate(self.model)
        return {"accuracy": accuracy, "test_loss": loss, "updates": self.updates, "versions": [self.updates]}

    def save(self, path: Path) -> None:
        state = self.model.state_dict()
        atomic_write(path, lambda f: torch.save(state, f), fsync=False)

    def close(self) -> None:
        """Removes an unanswered request, so the run directory ends tidy."""
        (self.run_dir / REQUEST_FILE).unlink(missing_ok=True)
