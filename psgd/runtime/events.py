"""Metric events: one JSON object per line, each with `t` and `role`.

Every process writes its own events file; the launcher merges them into the
run's metrics.jsonl. `t` is seconds since training start (the moment every
process was ready), so all processes and all modes share one clock.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional

from psgd.runtime.event_names import Event
from psgd.runtime.safe_io import open_no_follow

__all__ = ["EventLog", "EventTail", "read_events"]


class EventLog:
    """Appends events to a JSONL file (or nowhere, if path is None). Thread-safe
    enough for one writer thread; each event is one line-buffered write."""

    def __init__(self, path: Optional[Path], role: str, index: int):
        self.role = role
        self.index = index
        self.t0: Optional[float] = None
        self.write_error: Optional[OSError] = None
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_no_follow(path, "a", buffering=1)

    def now(self) -> float:
        return time.time() - self.t0 if self.t0 is not None else 0.0

    def emit(self, event: Event, at: Optional[float] = None, **fields) -> None:
        """`at`: the event's time when it describes an earlier moment than its
        writing (an evaluation is of the parameters pulled before scoring)."""
        if self._file is None:
            return
        t = self.now() if at is None else at
        rec = {"t": round(t, 4), "role": self.role, "index": self.index, "event": event,
               **{k: _finite(v) for k, v in fields.items()}}
        try:
            self._file.write(json.dumps(rec, default=_jsonable) + "\n")
        except OSError as exc:
            # A full disk must not crash training: events are the record of a run,
            # not its state. Writing stops; `write_error` says why (and where).
            self.write_error = exc
            self._drop_file()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self.write_error = exc
            self._file = None

    def _drop_file(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass
        self._file = None


def _finite(value):
    """NaN and infinities become null: strict JSON readers (pandas, jq) reject them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _jsonable(obj):
    if hasattr(obj, "item"):
        return _finite(obj.item())
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_events(path: Path) -> list[dict]:
    """Every complete event of a JSONL file. A torn last line (a writer killed
    mid-line) is left out; any other unreadable line raises ValueError naming the file."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    lines.pop()  # after the last newline: empty, or a line still being written
    return _parse_lines(lines, path)


def _parse_lines(lines: list[str], path: Path) -> list[dict]:
    out = []
    for line in lines:
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: unreadable event line: {exc}") from None
    return out


class EventTail:
    """Follows a JSONL events file: each `read` returns the events completed since the last one."""

    def __init__(self, path: Path, from_end: bool = False):
        self.path = Path(path)
        self._offset = self.path.stat().st_size if from_end and self.path.exists() else 0
        self._partial = ""

    def read(self) -> list[dict]:
        try:
            with open(self.path) as f:
                f.seek(self._offset)
                chunk = f.read()
                self._offset = f.tell()
        except FileNotFoundError:
            return []
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        return _parse_lines(lines, self.path)
