"""What a launch records as it runs: every child's events, merged in arrival order
into metrics.jsonl (and metrics.csv / TensorBoard), the progress they imply, and,
for a resumed run, the events and training time of the runs before it.

The supervisor (supervisor.py) decides what happens to the processes; this is the
run's record of it. A write that fails (a full disk) is kept, not raised: the
launcher ends the run at its next poll with the file's name, and the events
stay in memory for summary.json.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from psgd.config import Config
from psgd.orchestrate.catch_up import unmerged_events
from psgd.orchestrate.launchers import LaunchFailed
from psgd.orchestrate.progress import Progress, ProgressTracker
from psgd.orchestrate.records.metrics_export import MetricsExport
from psgd.orchestrate.records.resume_check import ResumeRefused, check_resumable
from psgd.runtime.event_names import Event
from psgd.runtime.events import read_events
from psgd.runtime.safe_io import WriteFailed, describe_os_error, open_no_follow

__all__ = ["RunLog", "SUMMARY_FILE", "METRICS_FILE"]

SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"


class RunLog:
    def __init__(self, run_dir: Path, total_steps: int, on_progress: Callable[[Progress], None]):
        self.run_dir = run_dir
        self.events: list[dict] = []
        self._tracker = ProgressTracker(total_steps)
        self.progress = self._tracker.progress
        self.on_progress = on_progress
        self.prior_time = 0.0  # training time of the runs this one resumes
        self.error: Optional[WriteFailed] = None  # the first failed write of metrics.jsonl
        self.export: Optional[MetricsExport] = None  # metrics.csv and TensorBoard, once the run dir is ready
        self._metrics = None

    def load_previous(self, cfg: Config) -> None:
        """Pick up the events and training time of the stopped run being resumed. Raises LaunchFailed."""
        if not (self.run_dir / "checkpoints").is_dir():
            raise LaunchFailed(f"nothing to resume in {self.run_dir}: it has no checkpoints/")
        try:  # the CLI checked already; a library caller may not have
            check_resumable(cfg, self.run_dir)
        except ResumeRefused as exc:
            raise LaunchFailed(str(exc)) from None
        metrics = self.run_dir / METRICS_FILE
        if metrics.exists():
            self.events = read_events(metrics)
        self._count_steps()
        summary = self.run_dir / SUMMARY_FILE
        prior = json.loads(summary.read_text()) if summary.exists() else {}
        if prior.get("wall_time_s") is not None:
            self.prior_time = float(prior["wall_time_s"])
        else:  # the launcher itself was killed: the last event time is the best estimate
            self.prior_time = max((float(e.get("t", 0.0)) for e in self.events), default=0.0)

    def open(self, resume: bool) -> None:
        """Open metrics.jsonl for appending. A resumed run first merges what the
        children of a killed launcher wrote after it died (their last steps), so
        no step goes uncounted."""
        self._metrics = open_no_follow(self.run_dir / METRICS_FILE, "a", buffering=1)
        if not resume:
            return
        for e in unmerged_events(self.run_dir / "events", self.events):
            self.events.append(e)
            self._metrics.write(json.dumps(e) + "\n")
        self._count_steps()

    def start_export(self, cfg: Config) -> None:
        """metrics.csv (+ TensorBoard) from here on, for the resolved config."""
        self.export = MetricsExport(self.run_dir, cfg)

    def record(self, e: dict) -> None:
        self.events.append(e)
        if self.error is None:
            try:
                self._metrics.write(json.dumps(e) + "\n")
                if self.export is not None:
                    self.export.add(e)
            except OSError as exc:  # the run fails at the next poll; the events stay in memory
                self.error = describe_os_error(exc, self.run_dir / METRICS_FILE)
        self.on_progress(self._tracker.record(e))

    def close(self) -> None:
        """Close the files; their last writes may hit the same full disk, already reported."""
        if self._metrics is not None:
            try:
                self._metrics.close()
            except OSError:
                pass
        try:
            if self.export is not None:
                self.export.close()
        except OSError:
            pass

    def _count_steps(self) -> None:
        self.progress.steps = sum(1 for e in self.events if e.get("event") == Event.STEP)
