"""How busy the machine was while a real run trained (other jobs share its cores).

The 1-minute load average lags by a minute and counts this run's own start
(every role importing torch), so it says little about the few seconds a run
trains. Instead a thread samples the kernel's count of runnable threads
(/proc/loadavg's fourth field, less this sampling thread) every 0.2 s, and the
run's training window is read from its start signal (start.json) and wall time:
the median and maximum of the samples inside it. Threads asleep (a worker
waiting out its device time, a shard waiting for a request) are not runnable,
so on an idle machine a testbed run shows about 1.
"""
from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

__all__ = ["LoadWatch", "TrainingLoad", "load_avg", "runnable_now"]

PERIOD_S = 0.2


def load_avg() -> str:
    """The 1, 5 and 15-minute load averages, as /proc/loadavg writes them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _runnable() -> int:
    running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    return max(0, running - 1)  # this thread reads it while running


def runnable_now(seconds: float = 2.0) -> float:
    """The median runnable threads over the next `seconds` (between runs: other jobs only)."""
    samples = []
    for _ in range(max(1, int(seconds / PERIOD_S))):
        time.sleep(PERIOD_S)
        samples.append(_runnable())
    return statistics.median(samples)


@dataclass(frozen=True)
class TrainingLoad:
    median: float   # runnable threads, median over the training window
    max: int
    samples: int

    def __str__(self) -> str:
        return f"runnable p50 {self.median:g} max {self.max} ({self.samples} samples)"


class LoadWatch:
    """A context manager sampling runnable threads; `during(run_dir)` afterwards."""

    def __init__(self):
        self._samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "LoadWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(PERIOD_S):
            self._samples.append((time.time(), _runnable()))

    def during(self, run_dir: Path) -> Optional[TrainingLoad]:
        """The samples within the run's training (None: no start signal, or none inside)."""
        try:
            t0 = float(json.loads((run_dir / "start.json").read_text())["t0"])
            wall = float(json.loads((run_dir / "summary.json").read_text())["wall_time_s"])
        except (OSError, ValueError, KeyError):
            return None
        inside = [n for t, n in self._samples if t0 <= t <= t0 + wall]
        if not inside:
            return None
        return TrainingLoad(statistics.median(inside), max(inside), len(inside))
