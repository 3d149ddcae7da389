"""Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512; torchft's local_sgd.py):
the model syncs in fragments on a staggered schedule, so the peak traffic of a sync
falls by the number of fragments while each parameter still syncs once per round.

Here a fragment is a set of shards (shard s belongs to fragment s % F): each shard
already holds its slice's outer optimizer state, so every fragment has its own. Fragment
f's delta leaves after the inner steps t with t % H == offset(f), offset(f) = (f + 1) * H // F
(mod H; torchft's placement: the last fragment syncs where DiLoCo does). Its exchange
overlaps `fragment_sync_delay` (tau) inner steps, then the fragment's parameters become
alpha * local + (1 - alpha) * synced, and its next delta is measured from the synced ones.

Synchronous under bsp (each shard averages one delta per worker per round), asynchronous
under ssp/asp (with Delayed Nesterov when `delayed_nesterov` is set). With one fragment,
tau 0 and alpha 0 it is DiLoCo (or async DiLoCo), step for step.
"""
from __future__ import annotations

from psgd.core.local_methods.base import LocalMethod, Schedule, local_method

__all__ = ["StreamingDiLoCo", "fragment_shards"]


def fragment_shards(fragments: int, num_shards: int) -> list[list[int]]:
    """The shards of each fragment, dealt round robin (every fragment gets at least one)."""
    if not 1 <= fragments <= num_shards:
        raise ValueError(f"{fragments} fragments over {num_shards} shards: need 1..{num_shards}")
    return [list(range(f, num_shards, fragments)) for f in range(fragments)]


@local_method
class StreamingDiLoCo(LocalMethod):
    word = "streaming_diloco"
    name = "streaming DiLoCo"
    schedule = Schedule.FRAGMENTS

    def momentum_period(self) -> int:
        return self.workers if self.local.delayed_nesterov else 1

    def push_share(self, live: bool) -> float:
        # Delayed Nesterov applies each delta at lr / period by itself (as AsyncDiLoCo)
        return 1.0 if self.local.delayed_nesterov else super().push_share(live)

    @property
    def fragments(self) -> int:
        return self.local.fragments

    @property
    def delay(self) -> int:
        """tau: inner steps between a fragment's send and its merge."""
        return self.local.fragment_sync_delay

    @property
    def alpha(self) -> float:
        return self.local.fragment_update_alpha

    def offset(self, fragment: int) -> int:
        """The inner step (mod H) after which `fragment`'s delta leaves."""
        return (fragment + 1) * self.local.steps // self.fragments % self.local.steps

    def sends_after(self, step: int) -> list[int]:
        """Fragments whose delta leaves after inner step `step` (1-based, counted from the
        worker's first step)."""
        at = step % self.local.steps
        return [f for f in range(self.fragments) if self.offset(f) == at]
