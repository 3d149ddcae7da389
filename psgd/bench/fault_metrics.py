"""The arithmetic of `psgd bench faults`, on a run's event log and the kills sent to it.

Pure (no I/O, no clocks): everything is read from the events a run leaves in
metrics.jsonl (psgd.runtime.event_names) and the list of kills the bench made.

- Useful updates: what every shard applied (its final `server_stats` version,
  the least over shards), never a resent or duplicate push, which a shard
  recognises by its seq and does not apply. Goodput = useful updates per second
  of training (summary.json's wall_time_s).
- Acked against applied, per shard (`account`): the shard acknowledged as
  applied exactly what it applied, and the workers' own count of the pushes
  they made reconciles with it, every difference named (a push a killed
  worker got to some shards only; the ack a worker stopped by train.max_time_s
  never read, at most one per rank).
- Time lost per fault: from the kill to the moment the lost process is back in
  the run, read from the shards' `register` events: a killed worker when every
  shard has registered its new incarnation; a killed shard when every worker
  has registered with its new incarnation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from psgd.config.modes import Role
from psgd.config.sim_faults import FaultTarget
from psgd.core.fault_plan import RESTART_MARGIN_S, kill_schedule, restarts_needed
from psgd.runtime.event_names import Event

__all__ = ["FaultTarget", "Kill", "kill_schedule", "restarts_needed", "Accounting", "account",
           "Recovery", "recoveries", "useful_updates", "goodput", "RESTART_MARGIN_S"]


@dataclass(frozen=True)
class Kill:
    t: float       # run time (seconds since the training clock started) of the SIGKILL
    role: Role     # worker or server
    index: int     # its rank or shard index
    pid: int


def _final_stats(events: Sequence[dict]) -> dict[int, dict]:
    latest: dict[int, dict] = {}
    for e in events:
        if e.get("event") == Event.SERVER_STATS:
            latest[int(e["index"])] = e
    return latest


def useful_updates(events: Sequence[dict]) -> int:
    """Updates every shard applied (the least final version over shards); 0 without stats."""
    stats = _final_stats(events)
    return min((int(s["version"]) for s in stats.values()), default=0)


def goodput(events: Sequence[dict], wall_time_s: float) -> float:
    """Useful updates per second of training."""
    if not wall_time_s > 0:
        raise ValueError(f"goodput: the run has no training time ({wall_time_s})")
    return useful_updates(events) / wall_time_s


@dataclass(frozen=True)
class Accounting:
    """One shard's applied updates against the acknowledgements, seen from both ends."""
    shard: int
    applied: int                 # the shard's final version
    acked: int                   # acks the shard sent saying "applied" (its push_applied counter)
    worker_pushes: int           # seqs the workers used, over every incarnation (their done events)
    partial: int                 # seqs this shard never saw: pushes a killed worker got to other shards only
    unread_at_stop: int          # applied pushes whose ack a worker stopped by the limit never read (<= 1 per rank)
    problems: tuple[str, ...]    # every way the counts disagree (empty: they agree)

    @property
    def holds(self) -> bool:
        return not self.problems


def account(events: Sequence[dict], workers: int) -> list[Accounting]:
    """Per shard, two checks. The shard's own: every applied update was acknowledged as
    applied (acked = applied). The workers': the seqs they used are exactly the pushes
    this shard applied, plus the ones it never saw (a worker killed mid-send reached
    only some shards; its successor continues after that seq), less the ones whose ack
    a worker stopped at train.max_time_s never read; that last kind shows as the
    shard's clock for a rank one ahead of the rank's final clock."""
    done: dict[int, dict] = {}
    for e in events:
        if e.get("event") == Event.DONE and e.get("role") == Role.WORKER:
            done[int(e["rank"])] = e  # the last incarnation's
    missing = [r for r in range(workers) if r not in done]
    # `seqs`: every seq the rank used, its killed predecessors' included (`pushes` counts one
    # process's); runs recorded before the field existed carried that count as `pushes`.
    used = sum(int(e.get("seqs", e["pushes"])) for e in done.values())
    out = []
    for shard, st in sorted(_final_stats(events).items()):
        counters = st.get("counters", {})
        applied, acked = int(st["version"]), int(counters.get("push_applied", 0))
        partial = int(counters.get("partial_pushes", 0))
        problems = [f"rank {r} never finished (no done event)" for r in missing]
        if acked != applied:
            problems.append(f"shard {shard}: applied {applied} updates, acknowledged {acked} as applied")
        clocks = [int(c) for c in st.get("clocks", [])]
        unread = 0
        for r, e in sorted(done.items()):
            gap = clocks[r] - int(e["clock"]) if r < len(clocks) else None
            if gap in (0, 1):
                unread += gap
            else:
                problems.append(f"shard {shard}: rank {r} ended at clock {e['clock']}, the shard has it at "
                                f"{clocks[r] if r < len(clocks) else 'no clock'}")
        if not missing and used != applied + partial - unread:
            problems.append(f"shard {shard}: the workers used {used} seqs; applied {applied} + never seen {partial} "
                            f"- ack unread at the stop {unread} = {applied + partial - unread}")
        out.append(Accounting(shard, applied, acked, used, partial, unread, tuple(problems)))
    return out


@dataclass(frozen=True)
class Recovery:
    """One kill and when the lost process was back."""
    kill: Kill
    restarted_at: Optional[float]   # the launcher's restart event (it saw the death)
    rejoined_at: Optional[float]    # the last register that brought it back (None: never)

    @property
    def lost_s(self) -> Optional[float]:
        return None if self.rejoined_at is None else self.rejoined_at - self.kill.t


def _of_index(process_index: int, role: str, shards: int) -> int:
    """The rank, or the shard, a restarted process serves."""
    return process_index % shards if role == Role.SERVER else process_index


def recoveries(events: Sequence[dict], kills: Sequence[Kill], workers: int, shards: int) -> list[Recovery]:
    """For each kill: the launcher's first restart of that process after it, and the
    first time after it that every needed registration had happened again."""
    restarts = [e for e in events if e.get("event") == Event.RESTART]
    registers = [e for e in events if e.get("event") == Event.REGISTER and e.get("role") == Role.SERVER]
    out = []
    for k in kills:
        # A shard's processes are numbered index + shards * j (cluster.replicas): any of them is the shard's.
        restarted = min((float(e["t"]) for e in restarts if e["process"] == k.role
                         and _of_index(int(e["process_index"]), k.role, shards) == k.index
                         and float(e["t"]) >= k.t), default=None)
        if k.role == Role.WORKER:
            pairs = [(s, k.index) for s in range(shards)]
        else:
            pairs = [(k.index, r) for r in range(workers)]
        firsts = []
        for shard, rank in pairs:
            t = min((float(e["t"]) for e in registers if int(e["index"]) == shard and int(e["rank"]) == rank
                     and float(e["t"]) > k.t), default=None)
            firsts.append(t)
        rejoined = None if any(t is None for t in firsts) else max(firsts)
        out.append(Recovery(k, restarted, rejoined))
    return out
