"""How the evaluator sees an all-reduce run's parameters (there are no servers).

Rank 0 publishes its flat parameter vector and update count to one file in
the run directory, at most every `eval.every_s` and once more at the end; the
evaluator reads the latest complete copy. Writes go to a temporary file and
are renamed into place, so a reader never sees a partial snapshot. For the
small models psgd benchmarks, a publish costs well under a millisecond.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

import torch

__all__ = ["SNAPSHOT_FILE", "SnapshotPublisher", "read_snapshot"]

SNAPSHOT_FILE = "allreduce_params.pt"


class SnapshotPublisher:
    """Rank 0's side: `maybe_publish` is cheap to call every step."""

    def __init__(self, run_dir: Optional[Path], every_s: float):
        self.path = Path(run_dir) / SNAPSHOT_FILE if run_dir is not None else None
        self.every_s = every_s
        self._last = float("-inf")

    def maybe_publish(self, flat_params: torch.Tensor, updates: int, force: bool = False) -> bool:
        now = time.monotonic()
        if self.path is None or (not force and now - self._last < self.every_s):
            return False
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save({"params": flat_params.detach().cpu().clone(), "updates": int(updates)}, tmp)
        os.replace(tmp, self.path)
        self._last = now
        return True


def read_snapshot(run_dir: Path) -> Optional[tuple[torch.Tensor, int]]:
    """(flat parameters, updates) of the latest snapshot, or None before the first."""
    path = Path(run_dir) / SNAPSHOT_FILE
    try:
        data = torch.load(path, weights_only=True)
    except FileNotFoundError:
        return None
    return data["params"], int(data["updates"])


class SnapshotEvaluator:
    """The evaluator's parameter source in allreduce mode: same interface as
    workers.evaluator.Evaluator, but reads rank 0's published snapshot."""

    def __init__(self, cfg, run_dir: Optional[Path]):
        from psgd.tasks import build_model, load_task
        if run_dir is None:
            raise ValueError("evaluating an allreduce run needs --run-dir (rank 0 publishes there)")
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.interruptible = True
        self.task = load_task(cfg)
        self.model = build_model(cfg, self.task)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.updates = 0

    def connect(self) -> None:
        """Nothing to connect to; the snapshot may not exist yet."""

    def evaluate(self) -> dict:
        snap = read_snapshot(self.run_dir)
        if snap is not None:
            flat, self.updates = snap
            with torch.no_grad():
                offset = 0
                for p in self.params:
                    p.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
        accuracy, loss = self.task.evaluate(self.model)
        return {"accuracy": accuracy, "test_loss": loss, "updates": self.updates, "versions": [self.updates]}

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        torch.save(self.model.state_dict(), tmp)
        tmp.replace(path)

    def close(self) -> None:
        """No resources held."""
