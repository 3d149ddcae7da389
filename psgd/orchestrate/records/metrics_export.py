"""A run's events as the tools users already read: metrics.csv (one row per
evaluation, for pandas or a spreadsheet) and, with `logging.tensorboard: true`,
TensorBoard event files under RUN_DIR/tensorboard.

Events are fed in as the launcher records them (or all at once by `collect`).
TensorBoard scalars use model updates as their step and the run's own clock
as their wall time, so TensorBoard's "relative" axis is seconds of training;
the tags under by_examples/ use training examples as their step instead.
Staleness and clock-gap histograms are the merged, cumulative histograms of
every shard, written at each evaluation.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Iterable, Optional

from psgd.config import Config
from psgd.core import update_size
from psgd.core.histogram import Histogram
from psgd.runtime.event_names import Event
from psgd.runtime.safe_io import open_no_follow

__all__ = ["MetricsExport", "CSV_FILE", "CSV_COLUMNS", "TENSORBOARD_DIR", "eval_updates", "export_events"]

CSV_FILE = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
CSV_COLUMNS = ["t_s", "updates", "examples", "test_accuracy", "test_loss", "train_loss", "updates_per_s",
               "staleness_mean", "staleness_max", "max_clock_gap", "final"]


def eval_updates(event: dict) -> int:
    """Model updates behind an evaluation: the furthest shard's version (every
    update reaches every shard, so one shard's count is the run's count; the
    shards differ only for the pushes in flight at the moment of the pull)."""
    versions = event.get("versions")
    return int(max(versions)) if versions else int(event.get("updates", 0))


def examples_per_update(cfg: Config) -> int:
    """Training examples in one model update of this run (psgd.core.update_size)."""
    return update_size.examples_per_update(cfg.consistency.mode, cfg.cluster.workers, cfg.task.batch_size,
                                           cfg.consistency.backup_workers, cfg.local.steps)


class MetricsExport:
    """Incremental metrics.csv (+ TensorBoard) writer for one run directory.
    Appends on resume; `t0` is the wall-clock start of training (default: taken
    from the first event)."""

    def __init__(self, run_dir: Path, cfg: Config, t0: Optional[float] = None):
        self.run_dir = Path(run_dir)
        self.t0 = t0
        self.per_update = examples_per_update(cfg)
        path = self.run_dir / CSV_FILE
        fresh = not path.exists() or path.stat().st_size == 0
        self._csv_file = open_no_follow(path, "a", newline="", buffering=1)
        self._csv = csv.DictWriter(self._csv_file, fieldnames=CSV_COLUMNS)
        if fresh:
            self._csv.writeheader()
        self._tb = _tensorboard_writer(self.run_dir / TENSORBOARD_DIR) if cfg.logging.tensorboard else None
        self._stats: dict[tuple[str, int], dict] = {}  # latest cumulative server_stats per shard
        self._loss_sum, self._loss_n = 0.0, 0
        self._last = (0.0, 0)  # (t, updates) of the previous evaluation

    def add(self, e: dict) -> None:
        ev = e.get("event")
        if ev == Event.STEP and e.get("loss") is not None:
            self._loss_sum += float(e["loss"])
            self._loss_n += 1
        elif ev == Event.SERVER_STATS:
            self._stats[(e.get("role", "server"), int(e.get("index", 0)))] = e
        elif ev == Event.EVAL and e.get("accuracy") is not None:
            self._evaluation(e)

    def add_all(self, events: Iterable[dict]) -> None:
        for e in events:
            self.add(e)

    def close(self) -> None:
        self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def _evaluation(self, e: dict) -> None:
        t, updates = float(e["t"]), eval_updates(e)
        staleness, gaps = Histogram(), Histogram()
        for st in self._stats.values():
            staleness.merge(st.get("staleness_hist", {}))
            gaps.merge(st.get("clock_gap_hist", {}))
        last_t, last_updates = self._last
        rate = (updates - last_updates) / (t - last_t) if t > last_t else None
        train_loss = self._loss_sum / self._loss_n if self._loss_n else None
        self._loss_sum, self._loss_n = 0.0, 0
        self._last = (t, updates)
        row = {"t_s": round(t, 4), "updates": updates, "examples": updates * self.per_update,
               "test_accuracy": e["accuracy"], "test_loss": e.get("test_loss"), "train_loss": train_loss,
               "updates_per_s": None if rate is None else round(rate, 3),
               "staleness_mean": round(staleness.mean, 4) if staleness.total else None,
               "staleness_max": staleness.max if staleness.total else None,
               "max_clock_gap": gaps.max if gaps.total else None, "final": bool(e.get("final", False))}
        self._csv.writerow(row)
        if self._tb is not None:
            self._write_tensorboard(row, staleness, gaps)

    def _write_tensorboard(self, row: dict, staleness: Histogram, gaps: Histogram) -> None:
        if self.t0 is None:
            self.t0 = time.time() - row["t_s"]
        wall, step, tb = self.t0 + row["t_s"], row["updates"], self._tb
        scalars = {"test/accuracy": row["test_accuracy"], "test/loss": row["test_loss"],
                   "train/loss": row["train_loss"], "train/updates_per_s": row["updates_per_s"],
                   "staleness/mean": row["staleness_mean"], "staleness/max": row["staleness_max"],
                   "clock_gap/max": row["max_clock_gap"]}
        for tag, value in scalars.items():
            if value is not None:
                tb.add_scalar(tag, value, global_step=step, walltime=wall)
        for key in ("test_accuracy", "test_loss"):
            if row[key] is not None:
                tb.add_scalar(f"by_examples/{key}", row[key], global_step=row["examples"], walltime=wall)
        for tag, hist in (("staleness", staleness), ("clock_gap", gaps)):
            if hist.total:
                _add_histogram(tb, tag, hist, step, wall)


TENSORBOARD_FLUSH_S = 5  # how stale a live TensorBoard view of a running job may be


def _tensorboard_writer(log_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise RuntimeError("logging.tensorboard needs the tensorboard package: "
                           "pip install 'psgd[tensorboard]'") from None
    # Flushed on a timer and at close, not per evaluation: a flush waits for the writer's
    # thread, and a bench matrix evaluates hundreds of times a run.
    return SummaryWriter(log_dir=str(log_dir), flush_secs=TENSORBOARD_FLUSH_S)


def _add_histogram(tb, tag: str, hist: Histogram, step: int, wall: float) -> None:
    """An integer histogram as TensorBoard buckets: value k counts in (k - 0.5, k + 0.5]."""
    keys = sorted(hist.counts)
    counts = [hist.counts[k] for k in keys]
    tb.add_histogram_raw(tag, min=keys[0], max=keys[-1], num=hist.total,
                         sum=sum(k * n for k, n in zip(keys, counts)),
                         sum_squares=sum(k * k * n for k, n in zip(keys, counts)),
                         bucket_limits=[k + 0.5 for k in keys], bucket_counts=counts,
                         global_step=step, walltime=wall)


def export_events(run_dir: Path, cfg: Config, events: Iterable[dict], t0: Optional[float] = None) -> None:
    """Write metrics.csv (and TensorBoard files) for a finished run's events,
    replacing an earlier export (used by `psgd collect`)."""
    (Path(run_dir) / CSV_FILE).unlink(missing_ok=True)
    for old in (Path(run_dir) / TENSORBOARD_DIR).glob("events.out.tfevents.*"):
        old.unlink()
    export = MetricsExport(run_dir, cfg, t0)
    try:
        export.add_all(events)
    finally:
        export.close()
