"""A PSClient built from a config: the one place that reads the client's
settings out of `Config` and checks them.

`ClientSettings.from_config` makes the checks (server addresses present, the
CurveZMQ keys readable) once; `connect` then builds as many clients as needed
(the worker role makes one, the evaluator one) without checking again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from psgd.config import Config, ConfigError
from psgd.config.operations import WireConfig
from psgd.core.sharding import Layout
from psgd.wire.codecs.runs import push_plans
from psgd.wire.keys.curve import client_curve
from psgd.wire.transport import CurveKeys
from psgd.workers.client import PSClient

__all__ = ["ClientSettings", "make_client"]


@dataclass(frozen=True)
class ClientSettings:
    """What a PSClient takes from a config, checked."""
    addresses: tuple[str, ...]
    request_timeout_s: float
    max_retries: int
    heartbeat_s: Optional[float]
    wire: WireConfig     # its compression chooses each shard's encoding once the layout is known
    local_updates: bool  # the pushes are local-update deltas (wire.compression's `deltas`)
    topk_ratio: float
    max_message_bytes: int
    curve: Optional[CurveKeys]
    shared_memory: str
    shared_memory_min_bytes: int

    @classmethod
    def from_config(cls, cfg: Config) -> "ClientSettings":
        """Raises ConfigError (naming cluster.servers) when the config holds only a
        server count, and TransportError when CurveZMQ keys are configured but missing."""
        if isinstance(cfg.cluster.servers, int):
            raise ConfigError("cluster.servers", "this role needs the list of server host:port addresses")
        c, w = cfg.cluster, cfg.wire
        return cls(addresses=tuple(c.servers), request_timeout_s=c.request_timeout_s, max_retries=c.max_retries,
                   heartbeat_s=c.heartbeat_s, wire=w, local_updates=cfg.local.enabled, topk_ratio=w.topk_ratio,
                   max_message_bytes=w.max_message_mb << 20, curve=client_curve(cfg),
                   shared_memory=w.shared_memory, shared_memory_min_bytes=w.shared_memory_min_bytes)

    def connect(self, layout: Layout, rank: int, role: str, should_stop: Optional[Callable[[], bool]] = None,
                token: Optional[str] = None, reply_slots: int = 1) -> PSClient:
        """A client for these settings (its sockets connect; nothing is sent until `register`).
        `reply_slots`: 2 for a pipelined worker (see PSClient)."""
        return PSClient(list(self.addresses), layout, rank=rank, role=role,
                        request_timeout_s=self.request_timeout_s, max_retries=self.max_retries,
                        heartbeat_s=self.heartbeat_s,
                        plans=push_plans(self.wire, layout, self.local_updates),
                        topk_ratio=self.topk_ratio,
                        max_message_bytes=self.max_message_bytes, should_stop=should_stop, curve=self.curve,
                        token=token, shared_memory=self.shared_memory,
                        shared_memory_min_bytes=self.shared_memory_min_bytes, reply_slots=reply_slots)


def make_client(cfg: Config, layout: Layout, rank: int, role: str, should_stop: Optional[Callable[[], bool]] = None,
                token: Optional[str] = None) -> PSClient:
    """One client straight from a config: the settings checked, then connected."""
    return ClientSettings.from_config(cfg).connect(layout, rank, role, should_stop, token)
