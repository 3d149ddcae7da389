"""SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706): DiLoCo's round, but each worker's
delta leaves top-k sparsified and 2-bit quantized, with per-worker error feedback in
place of the outer momentum:

    e <- beta * e + delta        (beta: local.outer_momentum, the paper's 0.95)
    sent = int2(topk(e))         (the k = topk_ratio share of each shard's largest |e|)
    e <- e - sent

and the shards step the mean of what was sent with SGD at local.outer_lr, without momentum.
The push travels in the wire's `topk_int2` codec (the top-k codec's choice of coordinates,
int2_ef's 2-bit values: psgd/wire/codecs/topk_int2.py), which keeps no residual: this method
hands it e and learns `sent` from the same codec's round trip, so the wire carries exactly
the indices and 2-bit codes that the shards apply."""
from __future__ import annotations

import dataclasses

import torch

from psgd.config import Config, ConfigError, OptimizerConfig
from psgd.core.local_methods.base import Codecs, LocalMethod, local_method

SENT = "topk_int2"  # the wire.compression word of what a delta travels as


@local_method
class SparseLoCo(LocalMethod):
    word = "sparseloco"
    name = "SparseLoCo"

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        if self.local.outer_nesterov or self.local.delayed_nesterov:
            raise ConfigError("local.method", "sparseloco's error feedback replaces the outer momentum: "
                              "unset local.outer_nesterov and local.delayed_nesterov")
        self.errors: list[torch.Tensor] = []  # per shard: what this worker has not sent yet, decayed

    def outer_rule(self, optimizer: OptimizerConfig, live: bool) -> OptimizerConfig:
        return dataclasses.replace(super().outer_rule(optimizer, live), momentum=0.0, nesterov=False)

    def outgoing(self, deltas: list[torch.Tensor], codecs: Codecs) -> list[torch.Tensor]:
        if any(word != SENT for word in codecs.pushes):
            raise ConfigError("wire.compression", f"local.method sparseloco sends top-k coordinates in 2 bits: set "
                              f"{SENT} for deltas (got {', '.join(sorted(set(codecs.pushes)))})")
        if not self.errors:
            self.errors = [torch.zeros_like(d) for d in deltas]
        for error, delta in zip(self.errors, deltas):
            error.mul_(self.local.outer_momentum).add_(delta)
            delta.copy_(error)  # what the push encodes: the codec sends int2(topk(e)) of it
            error.sub_(codecs.round_trip(SENT, error))
        return deltas

    def state_dict(self) -> dict:
        return {"errors": [e.clone() for e in self.errors]}

    def load_state_dict(self, state: dict) -> None:
        self.errors = [e.clone() for e in state.get("errors", [])]
