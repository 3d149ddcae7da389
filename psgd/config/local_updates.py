"""The `local:` section: local updates (local SGD, GEO-SGD, DiLoCo).

With `steps: H > 0` every worker takes H steps with its own inner optimizer
(the `optimizer` section, or the torch optimizer handed to psgd.Optimizer) and
then pushes the change in its parameters, start - end, instead of a gradient.
The shards treat that delta as the gradient of an outer SGD step whose rate,
momentum and Nesterov flag are set here; the consistency mode says when an
outer step happens (bsp: one averaged delta per worker per round; asp: each on
arrival, i.e. GEO-SGD; ssp: rounds bounded by the staleness). The rate is for the
mean of the workers' deltas: a delta applied alone (ssp, asp) takes its share,
outer_lr / workers (psgd.core.local_methods.optimizers.outer_optimizer). Outer lr 1 and no
momentum is plain local SGD; DiLoCo (Douillard et al. 2023) uses 0.7 with
Nesterov momentum 0.9.

Streaming DiLoCo (Douillard et al. 2025; torchft's local_sgd.py): with `fragments: F > 0`
the model syncs in F fragments (the shards, dealt round robin: fragment f holds every shard
s with s % F == f), fragment f after the inner steps t with t % H == (f + 1) * H // F % H, so
each shard still gets one delta per worker every H steps but the peak traffic is 1/F of a
whole-model sync. Each fragment's exchange overlaps `fragment_sync_delay` inner steps, after
which its parameters become fragment_update_alpha * local + (1 - alpha) * synced (torchft's
and the paper's convention: alpha weighs the worker's own parameters; 0 takes the synced ones).

`method` names the method (one module per method in psgd/core/local_methods/, which checks
at import that every word here has its module and every module its word). Left out, the older
flags say it, as they did before the key existed: fragments > 0 streaming_diloco, dynamic dylu,
eager eager, delayed_nesterov async_diloco, outer_momentum > 0 diloco, else local_sgd.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from psgd.config.loader import check as _check

__all__ = ["LocalConfig", "LocalMethodWord", "MAX_LOCAL_STEPS", "outer_word"]

# The local-update methods by their `local.method` word (each has one module in psgd/core/local_methods/).
LocalMethodWord = Literal["local_sgd", "diloco", "async_diloco", "dylu", "eager", "streaming_diloco", "sparseloco"]
# The older flag each method stands for: set under `method`, another method's flag is refused.
_FLAGS = {"dylu": "dynamic", "eager": "eager", "streaming_diloco": "fragments"}

# The methods whose outer rule may be Delayed Nesterov's (each steps with the outer settings' rule).
_DELAYED = {"async_diloco", "dylu", "eager", "streaming_diloco"}

MAX_LOCAL_STEPS = 1_000_000  # rounds of more steps than this never push within any run's budget


@dataclass(frozen=True)
class LocalConfig:
    steps: int = 0               # H: inner steps per push; 0 = off (every step pushes its gradient)
    # The local-update method (one of LocalMethodWord), used once steps > 0; None: as the older flags below say
    method: Optional[LocalMethodWord] = None
    # DyLU (Liu et al. 2024): a worker whose steps take k times the fastest worker's takes steps / k
    # steps per round, so that slow and fast workers' rounds last about as long (method: dylu)
    dynamic: bool = False
    outer_lr: float = 1.0        # the shards' outer step rate, for the mean of the workers' deltas
    outer_momentum: float = 0.0  # momentum of the outer SGD step (sparseloco: its error feedback's decay)
    outer_nesterov: bool = False  # Nesterov form of the outer momentum
    # Asynchronous modes: the outer momentum moves once per `cluster.workers` deltas, on their
    # mean; each delta in between is applied at outer_lr / workers (Liu et al. 2024)
    delayed_nesterov: bool = False
    # Streaming DiLoCo: fragments synced on a staggered schedule (0: the whole model at once)
    fragments: int = 0
    fragment_sync_delay: int = 0       # tau: inner steps a fragment's exchange overlaps (< steps // fragments)
    fragment_update_alpha: float = 0.0  # weight of the local parameters when a fragment's sync lands
    # Eager outer step (after Kale et al. 2025): a worker pushes its delta and goes on with its next
    # round at once, from the latest parameters it has minus its own delta; the round's outer update
    # is folded in one round later, when its reply is collected (method: eager)
    eager: bool = False

    def __post_init__(self):
        if self.method is not None:
            for word, flag in _FLAGS.items():
                _check(word == self.method or not getattr(self, flag), flag,
                       f"selects {word}, but local.method is {self.method}: set one of them")
            _check(self.method != "streaming_diloco" or self.fragments > 0, "fragments",
                   "local.method streaming_diloco syncs in fragments: set fragments >= 1")
            if self.method in ("dylu", "eager"):  # the older flag it stands for, for what still reads it
                object.__setattr__(self, _FLAGS[self.method], True)
            if self.method == "async_diloco":
                object.__setattr__(self, "delayed_nesterov", True)
        elif self.steps > 0:
            _check(not (self.dynamic and self.eager), "eager",
                   "dylu (dynamic) and eager are two methods: set local.method to one of them")
            object.__setattr__(self, "method", self._from_flags())
        _check(not self.delayed_nesterov or self.method in _DELAYED, "delayed_nesterov",
               f"is async_diloco's outer rule (also under {', '.join(sorted(_DELAYED - {'async_diloco'}))}), "
               f"not {self.method}'s")
        _check(0 <= self.steps <= MAX_LOCAL_STEPS, "steps", f"must be in 0..{MAX_LOCAL_STEPS}, got {self.steps}")
        _check(self.outer_lr > 0, "outer_lr", f"must be > 0, got {self.outer_lr}")
        _check(0 <= self.outer_momentum < 1, "outer_momentum", f"must be in [0, 1), got {self.outer_momentum}")
        _check(not self.outer_nesterov or self.outer_momentum > 0, "outer_nesterov", "needs outer_momentum > 0")
        _check(not self.delayed_nesterov or self.outer_momentum > 0, "delayed_nesterov",
               "needs outer_momentum > 0")
        _check(self.fragments >= 0, "fragments", f"must be >= 0, got {self.fragments}")
        _check(self.fragments <= self.steps, "fragments",
               f"must be <= steps ({self.steps}): each fragment syncs once per round of steps")
        _check(not (self.fragments and self.dynamic), "fragments",
               "streaming DiLoCo keeps a fixed schedule: it does not combine with dynamic")
        _check(0 <= self.fragment_sync_delay, "fragment_sync_delay", f"must be >= 0, got {self.fragment_sync_delay}")
        if self.fragment_sync_delay:
            _check(self.fragments > 0, "fragment_sync_delay", "needs fragments > 0")
            _check(self.fragment_sync_delay < self.steps // self.fragments, "fragment_sync_delay",
                   f"must be < steps // fragments ({self.steps // self.fragments}): one fragment in flight at a time")
        _check(0.0 <= self.fragment_update_alpha <= 1.0, "fragment_update_alpha",
               f"must be in [0, 1], got {self.fragment_update_alpha}")
        _check(self.fragment_update_alpha == 0.0 or self.fragments > 0, "fragment_update_alpha",
               "needs fragments > 0")
        _check(not self.eager or self.steps > 0, "eager", "needs local updates (steps > 0)")
        _check(not (self.eager and self.fragments), "eager",
               "streaming DiLoCo overlaps its fragments' exchanges itself (fragment_sync_delay): not with eager")

    def _from_flags(self) -> str:
        """The method the older flags select (configs written before `method`)."""
        if self.fragments:
            return "streaming_diloco"
        if self.dynamic:
            return "dylu"
        if self.eager:
            return "eager"
        return outer_word(self)

    @property
    def enabled(self) -> bool:
        return self.steps > 0


def outer_word(local: LocalConfig) -> str:
    """The method whose outer rule the outer flags give (momentum, Delayed Nesterov): what
    dylu and eager step the shards with."""
    if local.delayed_nesterov:
        return "async_diloco"
    return "diloco" if local.outer_momentum > 0 else "local_sgd"
