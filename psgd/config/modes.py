"""The consistency modes and the process roles, named once.

Every comparison of a mode or a role in psgd goes through these enums; the
config validates `consistency.mode` against `Mode`, and YAML, JSON, msgpack and
f-strings see their plain values ("ssp", "worker").
"""
from __future__ import annotations

from enum import Enum

__all__ = ["Mode", "PS_MODES", "MODES", "Role", "Overlap"]


class _Named(str, Enum):
    def __str__(self) -> str:  # f"{Mode.SSP}" is "ssp" on every Python version
        return self.value


class Mode(_Named):
    """How shards order pulls against pushes (the rule itself: psgd.core.modes.policy).

    BSP: a pull at clock c waits until the shard has applied the aggregated
         step of every clock below c (one update per clock).
    SSP: pushes apply on arrival; a pull at clock c waits until the slowest
         quorum worker's clock is at least c - staleness.
    ASP: pushes apply on arrival; pulls never wait.
    ALLREDUCE: the baseline: synchronous data parallelism, no servers.
    """
    BSP = "bsp"
    SSP = "ssp"
    ASP = "asp"
    ALLREDUCE = "allreduce"

    @property
    def on_servers(self) -> bool:
        """A parameter-server mode (every mode but the all-reduce baseline)."""
        return self is not Mode.ALLREDUCE

    @property
    def synchronous(self) -> bool:
        """One update averages every worker's gradient (BSP, all-reduce)."""
        return self in (Mode.BSP, Mode.ALLREDUCE)

    @property
    def live(self) -> bool:
        """`psgd ctl` may change the bound and switch between these (ssp, asp)."""
        return self in (Mode.SSP, Mode.ASP)


PS_MODES = tuple(mode for mode in Mode if mode.on_servers)
MODES = tuple(Mode)


class Role(_Named):
    """What a psgd process is (the role table: psgd.orchestrate.roles)."""
    SERVER = "server"
    WORKER = "worker"
    EVALUATOR = "evaluator"
    ALLREDUCE = "allreduce"

    @property
    def trains(self) -> bool:
        """A role that takes training steps (a worker, or an all-reduce rank)."""
        return self in (Role.WORKER, Role.ALLREDUCE)


class Overlap(_Named):
    """How a worker hides communication behind computation (`workers.overlap`)."""
    OFF = "off"              # push, wait for the parameters, then compute the next step
    PIPELINE = "pipeline"    # compute step k+1 on the parameters it has while step k's push is in flight
    BACKWARD = "backward"    # each shard's gradients leave as soon as backward has produced them
