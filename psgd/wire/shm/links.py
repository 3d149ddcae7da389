"""Which connections use shared memory, on each side.

`ClientSegments` (one per PSClient) keeps one segment per shard: it makes a
fresh one for every registration, so a restarted shard gets a new offer, and
unlinks the file once the shard has answered. `ShardSegments` (one per
shard) keeps the segments clients offered, by connection, and replaces a
rank's earlier segment when that rank registers again (a restarted worker),
so a shard holds at most one segment per (role, rank); it lets a segment go
when its connection leaves or times out.

A client offers a segment only to a shard whose tensor is at least
`wire.shared_memory_min_bytes` (`worth_sharing`): below that, waking the
shard and copying through the segment costs more than loopback TCP saves
(measured in benchmarks/comm). Every message on a connection moves that one
tensor (a gradient or the parameters), so the choice is made once per
connection rather than per message, and a small shard reserves no memory.
A client that cannot make a segment (too little memory for it) stays on
TCP and says so once, as a logging warning.

Neither side ever needs shared memory: every request that names no segment
generation carries its payload inline, and the shard answers inline whenever
it cannot use the segment, so one side with shared memory off, or on
another host, leaves the pair on TCP.
"""
from __future__ import annotations

import logging
import resource
from typing import Optional, Sequence

import torch

from psgd.config.operations import SHARED_MEMORY_MIN_BYTES
from psgd.wire.shm.attached import AttachedSegment
from psgd.wire.shm.doorbell import BellError, Bells, ClientBell, ShardBell
from psgd.wire.shm.segment import REPLY_SLOTS, Segment, ShmError, available, reply_slot_at

__all__ = ["ClientSegments", "ShardSegments", "PayloadCache", "shared_memory_wanted", "worth_sharing"]

_log = logging.getLogger(__name__)


def shared_memory_wanted(setting: str, secured: bool) -> bool:
    """`wire.shared_memory`: "auto" uses it where sealed memfd segments can be made and the
    run is not secured with CurveZMQ (the shard then trusts nothing it does
    not receive on its encrypted socket); "off" never does."""
    if setting not in ("auto", "off"):
        raise ValueError(f"wire.shared_memory must be auto or off, got {setting!r}")
    return setting == "auto" and not secured and available()


def worth_sharing(nbytes: int, min_bytes: int) -> bool:
    """Whether a connection whose payloads are a shard's `nbytes` of fp32 tensor
    goes through shared memory: from `min_bytes` up (`wire.shared_memory_min_bytes`)."""
    if min_bytes < 0:
        raise ValueError(f"wire.shared_memory_min_bytes must be >= 0, got {min_bytes}")
    return nbytes >= min_bytes


class ClientSegments:
    """A client's segment per shard. `offer` before registering, `settle` with
    the shard's answer; afterwards `segment(s)` is the attached one or None.
    Each segment comes with a doorbell (psgd.wire.shm.doorbell) for the connection's
    header-only messages; `bells` holds the ones the shard opened, by shard."""

    def __init__(self, shard_nbytes: Sequence[int], enabled: bool, min_bytes: int = SHARED_MEMORY_MIN_BYTES,
                 reply_slots: int = 1):
        if not 1 <= reply_slots <= REPLY_SLOTS:
            raise ValueError(f"reply_slots must be in 1..{REPLY_SLOTS}, got {reply_slots}")
        self.reply_slots = reply_slots  # 2: a pipelined worker's replies alternate between two slots
        self.bells = Bells()
        self._offered_bells: dict[int, ClientBell] = {}
        self._nbytes = list(shard_nbytes)   # fp32 bytes of each shard's tensor: the largest payload either way
        self.enabled = enabled
        self.wanted = [enabled and worth_sharing(n, min_bytes) for n in self._nbytes]
        self._offered: dict[int, Segment] = {}
        self._attached: dict[int, Segment] = {}
        self.unavailable: Optional[ShmError] = None   # why segments could not be made (warned once)

    def offer(self, shard: int) -> dict:
        """Register fields offering a fresh segment to `shard` ({} when off, when
        the shard's tensor is below the threshold, or when no segment can be
        made). Any earlier segment for it is dropped."""
        self._drop(shard)
        if not self.wanted[shard]:
            return {}
        try:
            n = self._nbytes[shard]
            seg = Segment.create(n, reply_slot_at(self.reply_slots - 1, n) + n)
        except ShmError as exc:
            if self.unavailable is None:
                self.unavailable = exc
                _log.warning("psgd: shared memory off, payloads go over TCP: %s", exc.reason)
            return {}
        self._offered[shard] = seg
        try:
            bell = self._offered_bells[shard] = ClientBell.create()
        except BellError:  # out of descriptors: the connection rings over ZeroMQ
            return {"shm": seg.name, "shm_token": seg.token_hex}
        return {"shm": seg.name, "shm_token": seg.token_hex, "bell": bell.name}

    def settle(self, shard: int, accepted: bool, bell_opened: bool = False) -> None:
        """The shard answered the offer: give up the name either way (the
        mappings keep the memory); keep the segment only if it was accepted,
        and the bell only if the shard opened it."""
        seg = self._offered.pop(shard, None)
        bell = self._offered_bells.pop(shard, None)
        if bell is not None:
            bell.settle()  # only the shard holds its ends now
            if accepted and bell_opened:
                self.bells.add(shard, bell)
            else:
                bell.close()
        if seg is None:
            return
        seg.unlink()
        if accepted:
            self._attached[shard] = seg
        else:
            seg.close()

    def segment(self, shard: int) -> Optional[Segment]:
        return self._attached.get(shard)

    def _drop(self, shard: int) -> None:
        for table in (self._offered, self._attached, self._offered_bells):
            seg = table.pop(shard, None)
            if seg is not None:
                seg.close()
        self.bells.drop(shard)

    def close(self) -> None:
        for shard in list(self._offered) + list(self._attached):
            self._drop(shard)
        self.bells.close()


class PayloadCache:
    """Writes each shard's payload into its segment at most once per request,
    even when the request is re-made (a re-registration replaced a segment:
    then the new one is written). Returns the generation to name."""

    def __init__(self, segments: ClientSegments):
        self._segments = segments
        self._written: dict[int, tuple[Segment, int]] = {}

    def generation(self, shard: int, payload) -> int:
        """0 (send inline) when the shard has no segment."""
        seg = self._segments.segment(shard)
        if seg is None:
            return 0
        hit = self._written.get(shard)
        if hit is None or hit[0] is not seg:
            hit = self._written[shard] = (seg, seg.put_request(payload)[0])
        return hit[1]


class ShardSegments:
    """The segments a shard has attached, by connection identity, and the
    doorbells that came with them (`bells`, which the shard's socket polls)."""

    def __init__(self, nbytes: int, enabled: bool, bells: Optional[Bells] = None):
        self.nbytes = nbytes            # the shard's fp32 tensor bytes
        self.enabled = enabled
        self.bells = bells if bells is not None else Bells()
        self._by_identity: dict[bytes, AttachedSegment] = {}
        self._identity_of: dict[tuple[str, int], bytes] = {}
        self._peer_of: dict[bytes, tuple[str, int]] = {}
        self._offer_of: dict[bytes, tuple] = {}  # identity -> (name, token, request id) of the attached offer
        self._bell_of: dict[bytes, str] = {}               # identity -> name of the bell opened with it
        self._used: set[bytes] = set()      # connections that used their segment since the last sweep
        self.refused: dict[str, int] = {}   # ShmError code -> offers refused (counters)

    def attach(self, identity: bytes, role: str, rank: int, name: str, token_hex: str,
               req: Optional[int] = None) -> bool:
        """Handle a registration's offer; True if the connection now uses shared
        memory. Any segment this connection or this (role, rank) had is released,
        except when it is this very offer: a REGISTER resent on the connection (a
        retry) keeps the segment it settled, whose name the client may have given up
        since (and its descriptor number then reused): the same request id, or a name
        that leads to the mapped file or nowhere, is the same offer."""
        held, offered = self._by_identity.get(identity), self._offer_of.get(identity)
        if (held is not None and offered is not None and offered[:2] == (name, token_hex)
                and self._peer_of.get(identity) == (role, rank)
                and ((req is not None and offered[2] == req) or held.still_named(name))):
            return True
        self.release_rank(role, rank)
        self.release(identity)
        if not (self.enabled and name):
            return False
        try:
            seg = AttachedSegment.attach(name, token_hex, self.nbytes, self.nbytes)
        except ShmError as exc:
            self.refused[exc.code] = self.refused.get(exc.code, 0) + 1
            return False
        self._by_identity[identity] = seg
        self._identity_of[(role, rank)] = identity
        self._peer_of[identity] = (role, rank)
        self._offer_of[identity] = (name, token_hex, req)
        return True

    def open_bell(self, identity: bytes, name: str) -> bool:
        """Open the doorbell offered with this connection's attached segment; True if
        its header-only messages ring from now on (else they stay on ZeroMQ). Bells
        take at most a quarter of the descriptors this process may open (two each),
        so that they never starve the sockets."""
        if not name or identity not in self._by_identity:
            return False
        if self._bell_of.get(identity) == name and self.bells.get(identity) is not None:
            return True  # a resent REGISTER: the bell opened for it still rings
        if 2 * (len(self.bells) + 1) > _descriptor_limit() // 4:
            self.refused["bell_limit"] = self.refused.get("bell_limit", 0) + 1
            return False
        try:
            self.bells.add(identity, ShardBell.open(name))
        except BellError as exc:
            self.refused[f"bell_{exc.code}"] = self.refused.get(f"bell_{exc.code}", 0) + 1
            return False
        self._bell_of[identity] = name
        return True

    def request(self, identity: bytes, gen: int, out: torch.Tensor, at: int = 0) -> bool:
        """Copy the request payload this connection's segment holds at generation
        `gen` (from byte `at` on: a piece) into `out` (the payload's dtype and size);
        False when there is none (no segment, stale generation, larger than the region)."""
        seg = self._by_identity.get(identity)
        if seg is None:
            return False
        if identity not in self._used:  # once per sweep, not a set.add per request
            self._used.add(identity)
        return seg.read_request(gen, out, at)

    def reply(self, identity: bytes, req: int, data: torch.Tensor, slot: int = 0) -> bool:
        """Copy a reply payload into the connection's segment, at reply slot `slot`;
        False: send it inline (also when the segment has no such slot)."""
        seg = self._by_identity.get(identity)
        if seg is None:
            return False
        if identity not in self._used:  # once per sweep, not a set.add per request
            self._used.add(identity)
        return seg.put_reply(req, data, slot)

    def release(self, identity: bytes) -> None:
        """The connection is gone (left, timed out, replaced): close its segment."""
        seg = self._by_identity.pop(identity, None)
        peer = self._peer_of.pop(identity, None)
        self._offer_of.pop(identity, None)
        self._bell_of.pop(identity, None)
        self._used.discard(identity)
        if peer is not None and self._identity_of.get(peer) == identity:
            del self._identity_of[peer]
        self.bells.drop(identity)
        if seg is not None:
            seg.close()

    def release_rank(self, role: str, rank: int) -> None:
        identity = self._identity_of.get((role, rank))
        if identity is not None:
            self.release(identity)

    def release_idle(self, role: str) -> int:
        """Release `role`'s segments not used since the previous call; returns how
        many. For peers that never say goodbye (evaluators): they just get their
        replies inline from then on."""
        mine = [i for i, (r, _) in self._peer_of.items() if r == role]
        idle = [i for i in mine if i not in self._used]
        for identity in idle:
            self.release(identity)
        self._used.difference_update(mine)
        return len(idle)

    def close(self) -> None:
        for identity in list(self._by_identity):
            self.release(identity)

    def __len__(self) -> int:
        return len(self._by_identity)


def _descriptor_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20
