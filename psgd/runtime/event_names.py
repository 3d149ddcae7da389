"""Every event a psgd process writes into its events file, and the fields each always has.

One definition for the writers (workers, shards, the evaluator, the launcher,
the simulator) and the readers (summary, progress, metrics export, the bench,
replay and calibration). A test checks every `emit(...)` call against FIELDS
and that no event name appears as a bare string anywhere else.
"""
from __future__ import annotations

from enum import Enum

__all__ = ["Event", "FIELDS"]


class Event(str, Enum):
    READY = "ready"                  # a process is up (workers: with its clock and device)
    ROLE = "role"                    # `psgd run`: the role the environment gave this process
    REGISTER = "register"            # a shard: a worker joined
    STEP = "step"                    # a worker finished a training step
    EVAL = "eval"                    # the evaluator scored the shards' parameters
    TARGET_REACHED = "target_reached"
    SERVER_STATS = "server_stats"    # a shard's cumulative counters (every second, and a final one)
    SETTING_CHANGE = "setting_change"  # the adaptive bound or psgd ctl changed a live setting
    SETTING_HOLD_EXPIRED = "setting_hold_expired"
    SETTING_HOLD_ABORTED = "setting_hold_aborted"
    LEAVE = "leave"                  # a shard: a worker left
    WORKER_TIMED_OUT = "worker_timed_out"
    PEER_CUT_OFF = "peer_cut_off"    # a shard dropped a client that stopped reading
    RESUMED = "resumed"              # a shard restarted from its checkpoint
    PROMOTED = "promoted"            # a shard's backup took over from its dead primary (cluster.replicas)
    RESTART = "restart"              # the launcher restarted a crashed process
    NODE_LOST = "node_lost"          # Ray: a node left the cluster with some of the run's roles
    MEMBERSHIP = "membership"        # the launcher: an elastic worker joined or left the run
    DONE = "done"                    # a worker (or all-reduce rank) finished
    ERROR = "error"
    RUN_DIR_UNLOCKED = "run_dir_unlocked"  # a hand-started role on a filesystem without flock

    def __str__(self) -> str:
        return self.value


# The fields every event of a kind carries (besides t, role, index, event); readers may rely on them.
FIELDS: dict[Event, frozenset[str]] = {
    Event.READY: frozenset(),
    Event.ROLE: frozenset({"launcher", "rank", "world_size"}),
    Event.REGISTER: frozenset({"rank", "clock"}),
    Event.STEP: frozenset({"rank", "clock", "loss", "compute_s", "comm_s", "step_s", "gap"}),
    Event.EVAL: frozenset(),  # the evaluation's own fields (accuracy, test_loss, updates, ...)
    Event.TARGET_REACHED: frozenset({"accuracy"}),
    Event.SERVER_STATS: frozenset({"version", "counters"}),
    Event.SETTING_CHANGE: frozenset({"origin", "effective_clock", "changes", "setting"}),
    Event.SETTING_HOLD_EXPIRED: frozenset(),
    Event.SETTING_HOLD_ABORTED: frozenset(),
    Event.LEAVE: frozenset({"rank", "clock"}),
    Event.WORKER_TIMED_OUT: frozenset({"rank", "clock"}),
    Event.PEER_CUT_OFF: frozenset({"role", "rank"}),
    Event.RESUMED: frozenset(),
    Event.PROMOTED: frozenset({"version", "followed"}),
    Event.RESTART: frozenset({"process", "process_index", "attempt", "cause"}),
    Event.NODE_LOST: frozenset({"node", "roles", "cause", "restarted", "line"}),
    Event.MEMBERSHIP: frozenset({"rank", "change", "clock", "cause"}),
    Event.DONE: frozenset({"rank", "clock", "steps", "resends"}),
    Event.ERROR: frozenset({"reason"}),
    Event.RUN_DIR_UNLOCKED: frozenset({"reason"}),
}
if set(FIELDS) != set(Event):
    raise ImportError(f"events without a field list: {set(Event) - set(FIELDS)}")
