"""Who may speak for which rank: the shard's authorisation table.

Authentication (loopback-only, or CurveZMQ keys) says who may connect; this
says what a connection may do once connected:

- A worker rank is bound to the connection that registered it (and to its
  Curve public key when Curve is on). Pushes, pulls and leaves for the rank
  from any other connection are refused.
- Another connection may take a bound rank over only with the run token (a
  restarted worker started by the launcher) and, under Curve, the same key.
  Without a token, a rank is free again once its worker leaves or times out.
- Heartbeats come from a worker's separate heartbeat socket, so they carry
  the random session string the shard handed out at registration instead.
- SHUTDOWN needs the run token; a shard started without one (embedded in a
  user's process) takes it from a registered worker, never an evaluator.
- Seq and clock may only move ahead by a bounded step (MAX_AHEAD), so one
  absurd value cannot disable later pushes or park pulls forever.
"""
from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from typing import Optional

from psgd.config.modes import Role
from psgd.wire.protocol import ErrorCode, ProtocolError
from psgd.wire.shm.segment import REPLY_SLOTS

__all__ = ["PeerTable", "Binding", "check_ahead", "MAX_AHEAD"]

# Far more than any real worker moves in one message (it moves by one), far less
# than the values that broke shards (2**63, 1e12).
MAX_AHEAD = 1 << 20


@dataclass
class Binding:
    identity: bytes
    key: Optional[str]   # Curve public key (Z85) of the connection, None without Curve
    session: str         # heartbeats for the rank must carry this


class PeerTable:
    def __init__(self, run_token: Optional[str] = None):
        self.run_token = run_token
        self.roles: dict[bytes, tuple[str, int]] = {}   # connection identity -> (role, rank)
        self.ranks: dict[int, Binding] = {}             # worker rank -> its binding

    def token_ok(self, token: str) -> bool:
        return bool(self.run_token) and hmac.compare_digest(token.encode(), self.run_token.encode())

    # ---- registration -------------------------------------------------------
    def register(self, identity: bytes, role: str, rank: int, key: Optional[str] = None, token: str = "") -> str:
        """Bind `identity` as (role, rank); returns the heartbeat session ("" for
        evaluators). Raises ProtocolError(ErrorCode.RANK_BOUND) for a takeover that is
        not allowed; the table is unchanged then."""
        if role != Role.WORKER:
            self._unbind_identity(identity)
            self.roles[identity] = (role, rank)
            return ""
        bound = self.ranks.get(rank)
        if bound is not None and bound.identity != identity:
            if bound.key is not None and key != bound.key:
                raise ProtocolError(ErrorCode.RANK_BOUND, f"worker {rank} is registered with another client key")
            if not self.token_ok(token):
                raise ProtocolError(ErrorCode.RANK_BOUND, f"worker {rank} is registered from another connection; "
                                    "only the run's own workers (with the run token) may take it over")
        self._unbind_identity(identity)
        if bound is not None and bound.identity != identity:
            self.roles.pop(bound.identity, None)  # the old connection may no longer act for the rank
            bound = None
        session = bound.session if bound is not None else secrets.token_hex(16)
        self.ranks[rank] = Binding(identity, key, session)
        self.roles[identity] = ("worker", rank)
        return session

    def _unbind_identity(self, identity: bytes) -> None:
        """A connection re-registering as something else gives up what it held."""
        old = self.roles.pop(identity, None)
        if old is not None and old[0] == Role.WORKER:
            b = self.ranks.get(old[1])
            if b is not None and b.identity == identity:
                del self.ranks[old[1]]

    def release(self, rank: int) -> None:
        """The rank left or timed out: anyone may register it again."""
        b = self.ranks.pop(rank, None)
        if b is not None:
            self.roles.pop(b.identity, None)

    def forget(self, identity: bytes) -> Optional[tuple[str, int]]:
        """Drop a connection (cut off for not reading); returns what it was."""
        peer = self.roles.get(identity)
        if peer is not None and peer[0] == Role.WORKER:
            self.release(peer[1])
        return self.roles.pop(identity, None) or peer

    # ---- checks ---------------------------------------------------------------
    def role_of(self, identity: bytes) -> Optional[str]:
        peer = self.roles.get(identity)
        return peer[0] if peer else None

    def check_worker(self, identity: bytes, rank: int) -> None:
        peer = self.roles.get(identity)
        if peer is None:
            raise ProtocolError(ErrorCode.NOT_REGISTERED, "register with this shard first")
        if peer != (Role.WORKER, rank):
            raise ProtocolError(ErrorCode.BAD_RANK, f"connection registered as {peer[0]} {peer[1]}, message says worker {rank}")

    def heartbeat_ok(self, rank: int, session: str) -> bool:
        b = self.ranks.get(rank)
        return b is not None and bool(session) and hmac.compare_digest(session.encode(), b.session.encode())

    def may_shut_down(self, identity: bytes, token: str) -> bool:
        if self.run_token:
            return self.token_ok(token)
        return self.role_of(identity) == Role.WORKER


_AHEAD_CODES = {"seq": ErrorCode.BAD_SEQ, "clock": ErrorCode.BAD_CLOCK}


def check_ahead(name: str, value: int, current: int, limit: int = MAX_AHEAD) -> None:
    """Refuse a seq or clock (`name`) more than `limit` ahead of `current` (state untouched)."""
    if value > current + limit:
        raise ProtocolError(_AHEAD_CODES[name], f"{name} {value} is more than {limit} ahead of {current}")


def check_slot(slot: int) -> None:
    """Refuse a reply slot a shared-memory segment cannot have (state untouched)."""
    if not 0 <= slot < REPLY_SLOTS:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"slot must be in 0..{REPLY_SLOTS - 1}")
