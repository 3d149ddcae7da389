"""SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706): DiLoCo's round, but each worker's
delta leaves top-k sparsified and 2-bit quantized, with per-worker error feedback in
place of the outer momentum:

    e <- beta * e + delta        (beta: local.outer_momentum, the paper's 0.95)
    sent = int2(topk(e))         (the k = topk_ratio share of each shard's largest |e|)
    e <- e - sent

and the shards step the mean of what was sent with SGD at local.outer_lr, without momentum.
The top-k and the 2-bit quantizer are the wire's own codecs (`wire.compression: topk`,
`int2_ef`), applied by round trip through what the worker hands `outgoing`; the push then
travels in the run's top-k codec, which sends exactly the k coordinates chosen here, so its
own residual stays zero."""
from __future__ import annotations

import dataclasses

import torch

from psgd.config import Config, ConfigError, OptimizerConfig
from psgd.core.local_methods.base import Codecs, LocalMethod, local_method

SPARSE = "topk"     # the wire.compression word whose round trip keeps the k largest magnitudes
QUANTIZED = "int2_ef"  # and the one whose round trip quantizes values to 2 bits (a fresh residual)


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
        if any(word != SPARSE for word in codecs.pushes):
            raise ConfigError("wire.compression", f"local.method sparseloco sends top-k coordinates: set {SPARSE} "
                              f"for deltas (got {', '.join(sorted(set(codecs.pushes)))})")
        if not self.errors:
            self.errors = [torch.zeros_like(d) for d in deltas]
        for error, delta in zip(self.errors, deltas):
            error.mul_(self.local.outer_momentum).add_(delta)
            kept = codecs.round_trip(SPARSE, error)
            index = kept.nonzero().flatten()
            delta.zero_().index_copy_(0, index, codecs.round_trip(QUANTIZED, kept[index]))
            error.sub_(delta)
        return deltas

    def state_dict(self) -> dict:
        return {"errors": [e.clone() for e in self.errors]}

    def load_state_dict(self, state: dict) -> None:
        self.errors = [e.clone() for e in state.get("errors", [])]
