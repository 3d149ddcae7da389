"""The states a run and each of its processes pass through, named once.

A run (summary.json's `status`):

    RUNNING  --the last worker finished-->          OK
    RUNNING  --a process failed for good-->         FAILED
    RUNNING  --SIGINT / SIGTERM to the launcher-->  INTERRUPTED
    RUNNING  --workers still there a grace after train.max_time_s, killed-->  TIME_LIMIT

One role's process, as the launcher supervises it:

    STARTING --its `ready` event-->                 READY
    READY    --a worker exits 0 after the start-->  DONE
    any other exit ends the process object: the launcher books a restart (a new
    process, STARTING) or fails the run; a DONE process stays DONE.
"""
from __future__ import annotations

from enum import Enum

__all__ = ["ChildState", "RunStatus"]


class _Named(str, Enum):
    def __str__(self) -> str:  # JSON, f-strings and summary.json see the plain value
        return self.value


class RunStatus(_Named):
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    TIME_LIMIT = "time_limit"


class ChildState(_Named):
    STARTING = "starting"
    READY = "ready"
    DONE = "done"

    def to(self, new: "ChildState") -> "ChildState":
        """`new`, if the diagram above allows it from here (staying put is allowed)."""
        if new is not self and (self, new) not in _STEPS:
            raise ValueError(f"a process cannot go from {self} to {new}")
        return new

    @property
    def ready(self) -> bool:
        """It has said it is ready (a DONE worker was ready before)."""
        return self is not ChildState.STARTING


_STEPS = {(ChildState.STARTING, ChildState.READY), (ChildState.READY, ChildState.DONE)}
