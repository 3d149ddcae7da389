"""What `psgd explain` says about a run's breakdown (psgd.bench.explain): the critical
path in words a user acts on, each sentence with the figures it rests on and where
they come from. The words come from the numbers; thresholds are named here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from psgd.bench.explain import Breakdown
from psgd.config import Mode

__all__ = ["Finding", "findings", "waited_on", "BOTTLENECK_SHARE", "CULPRIT_SHARE"]

BOTTLENECK_SHARE = 0.8  # a shard busy this share of the time queues requests: it is the bottleneck
CULPRIT_SHARE = 0.5     # a rank whose pushes ended at least this share of the waits is the one waited on


@dataclass(frozen=True)
class Finding:
    text: str
    source: str


@dataclass(frozen=True)
class WaitedOn:
    rank: int
    share_of_waits: float    # of all the parked time the shards ended, the share this rank's requests ended
    last_share: float        # of the clocks every rank reached, the share at which its push arrived last
    others_wait_share: float  # the other workers' parked time over their spans


def waited_on(b: Breakdown) -> Optional[WaitedOn]:
    """The rank the others waited on, where one rank ended most of the waits (None: nobody
    waited, or the waits were spread over the ranks)."""
    total = sum(b.waited_on_s)
    if total <= 0:
        return None
    rank = max(range(len(b.waited_on_s)), key=b.waited_on_s.__getitem__)
    if b.waited_on_s[rank] / total < CULPRIT_SHARE:
        return None
    others = [w for w in b.workers if w.rank != rank]
    span = sum(w.span_s for w in others)
    return WaitedOn(rank, b.waited_on_s[rank] / total,
                    b.last_at_clock.get(rank, 0) / b.clocks_compared if b.clocks_compared else 0.0,
                    sum(w.wait_s for w in others) / span if span > 0 else 0.0)


def _label(b: Breakdown) -> str:
    if b.mode is Mode.SSP:
        return f"SSP (bound {b.staleness})"
    if b.mode is Mode.BSP and b.backup_workers:
        return f"BSP with {b.backup_workers} backup worker(s)"
    return b.mode.value.upper()


def findings(b: Breakdown) -> list[Finding]:
    out: list[Finding] = []
    label = _label(b)
    span = sum(w.span_s for w in b.workers)
    share = (lambda x: x / span) if span > 0 else (lambda x: 0.0)
    wait = sum(w.wait_s for w in b.workers)
    if b.mode is Mode.ASP:
        stale = (f"; staleness p95 {b.staleness_p95:g} (max {b.staleness_max}) at {len(b.workers)} workers"
                 if b.staleness_p95 is not None else "")
        out.append(Finding(f"ASP: no barrier and no bound, so no worker waits on another{stale}",
                           "the run's mode; the shards' staleness histograms (server_stats)"))
    elif not b.mode.on_servers:
        slowest = max(b.last_at_clock, key=b.last_at_clock.get, default=None)
        last = b.last_at_clock.get(slowest, 0) / b.clocks_compared if b.clocks_compared else 0.0
        named = f"; rank {slowest} is the slowest at {last:.0%} of {b.clocks_compared} steps" \
            if slowest is not None and last >= CULPRIT_SHARE else ""
        out.append(Finding(f"{label}: every step ends with an all-reduce that waits for the slowest rank; the round "
                           f"trip column holds it and that wait ({share(sum(w.transfer_s for w in b.workers)):.0%} "
                           f"of the ranks' time){named}", "step events (comm_s; the last rank into each step)"))
    else:
        who = waited_on(b)
        if who is not None:
            out.append(Finding(f"{label}: rank {who.rank} is the one the others wait on: its pushes ended "
                               f"{who.share_of_waits:.0%} of the waits and it was last at {who.last_share:.0%} of "
                               f"{b.clocks_compared} clocks; the others wait {who.others_wait_share:.0%} of their time "
                               "for it",
                               "server_stats waits (parked pulls, whose push released them); step events "
                               f"(the last push of each clock); the others' wait: {b.wait_source}"))
        elif wait > 0:
            out.append(Finding(f"{label}: the workers wait {share(wait):.0%} of their time at the "
                               f"{'barrier' if b.mode is Mode.BSP else 'bound'}, spread over the ranks "
                               "(no one rank is waited on)", b.wait_source))
        else:
            out.append(Finding(f"{label}: no pull waited at the {'barrier' if b.mode is Mode.BSP else 'bound'}",
                               b.wait_source))
    busiest = max((s for s in b.shards if s.busy_share is not None), key=lambda s: s.busy_share, default=None)
    if busiest is not None:
        verdict = "it is the bottleneck: more shards (cluster.servers) or a cheaper update help" \
            if busiest.busy_share >= BOTTLENECK_SHARE else "not a bottleneck"
        out.append(Finding(f"shard {busiest.shard} is busy {busiest.busy_share:.0%} of the time: {verdict}",
                           "server_stats busy_s over the time it was reported"))
    compute = sum(w.compute_s for w in b.workers)
    transfer = sum(w.transfer_s for w in b.workers)
    parts = {"computing": compute, "waiting on other workers": wait, "in round trips (transfer, shard service)":
             transfer, "elsewhere (start-up, gaps, restarts)": sum(w.other_s for w in b.workers)}
    top = max(parts, key=parts.get)
    out.append(Finding(f"the workers spend most of their time {top} ({share(parts[top]):.0%}): "
                       + ", ".join(f"{k} {share(v):.0%}" for k, v in parts.items()),
                       f"step events (step_s, comm_s); {b.wait_source}"))
    if b.restarts:
        out.append(Finding("restarted: " + ", ".join(f"{k} x{n}" for k, n in sorted(b.restarts.items())),
                           "restart events (the launcher)"))
    return out
