"""Request tracking over per-shard connections: ids, waiting for N replies, resends.

`RequestTracker.call` sends one request to each addressed shard, all before
waiting for any reply, then collects the replies, matching them by request
id. A shard that has not answered within the timeout is sent the same bytes
again (same request id, same push seq, so the shard recognises the resend).
Where the connections watch their links (psgd.wire.transport.link_watch), a shard whose
connection comes back (restarted, or a backup promoted onto its address) is
resent its request at once, and a patient call does not count attempts while
a shard's connection is down: the launcher is restarting it. Replies to
requests already answered are discarded. Blocking; not thread-safe.
"""
from __future__ import annotations

import itertools
import time
from typing import Callable, Optional

from psgd.wire import protocol as P
from psgd.wire.transport import ShardConnections
from psgd.wire.transport.link_watch import Link

__all__ = ["RequestTracker", "Pending", "RemoteError", "RequestFailed", "Interrupted"]


class RemoteError(RuntimeError):
    """A shard answered with an ERROR message."""

    def __init__(self, shard: int, code: str, reason: str):
        self.shard, self.code, self.reason = shard, code, reason
        super().__init__(f"shard {shard} refused the request ({code}): {reason}")


class RequestFailed(RuntimeError):
    """A shard did not answer after every resend."""


class Interrupted(RuntimeError):
    """The caller's stop condition became true while waiting."""


class RequestTracker:
    def __init__(self, conns: ShardConnections, timeout_s: float, max_retries: int,
                 should_stop: Optional[Callable[[], bool]] = None):
        self.conns = conns
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.should_stop = should_stop  # None: never stop waiting
        self._ids = itertools.count(1)
        self.resends = 0
        self.failovers = 0  # requests resent because their shard's connection came back

    def next_id(self) -> int:
        return next(self._ids)

    def call(self, requests: dict[int, list], timeout_s: Optional[float] = None,
             max_retries: Optional[int] = None, interruptible: bool = True,
             patient: bool = True) -> dict[int, tuple[P.Record, list]]:
        """`requests` maps shard -> encoded frames (whose header carries a fresh
        request id from `next_id`). Returns shard -> (reply record, payload).
        Raises RemoteError for an ERROR reply, RequestFailed after max_retries,
        Interrupted if `should_stop` turns true (unless not interruptible).
        `patient`: a shard whose connection dropped is waited for without using up
        attempts (False for best-effort calls such as a leave at the end of a run)."""
        return self.wait(self.start(requests, timeout_s, max_retries, interruptible, patient))

    def start(self, requests: dict[int, list], timeout_s: Optional[float] = None,
              max_retries: Optional[int] = None, interruptible: bool = True, patient: bool = True) -> "Pending":
        """Send the requests and return at once; `wait` collects the replies (and resends
        to shards that have not answered in time). One pending call at a time per tracker."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        for shard, frames in requests.items():
            self.conns.send(shard, frames)
        return Pending(requests, {shard: P.request_id(frames) for shard, frames in requests.items()},
                       dict.fromkeys(requests, time.monotonic() + timeout_s), timeout_s,
                       self.max_retries if max_retries is None else max_retries, interruptible, patient)

    def wait(self, pending: "Pending") -> dict[int, tuple[P.Record, list]]:
        requests, want, replies = pending.requests, pending.want, pending.replies
        attempts, deadline = pending.attempts, pending.deadline
        links = self.conns.links
        should_stop = self.should_stop if pending.interruptible else None
        need = len(requests)
        while len(replies) < need:
            if should_stop is not None and should_stop():
                raise Interrupted("stopped while waiting for shards")
            for shard, frames in self.conns.recv(timeout_ms=100):
                try:
                    record, payload = P.decode(frames)
                except P.ProtocolError as exc:
                    raise RemoteError(shard, "bad_reply", str(exc)) from None
                if shard not in want or record.req != want[shard] or shard in replies:
                    continue  # a late answer to an earlier attempt or request
                if isinstance(record, P.Error):
                    raise RemoteError(shard, record.code, record.reason)
                replies[shard] = (record, payload)
            now = time.monotonic()
            if links is not None and links.unread:
                self._follow_links(pending, now)
            for shard in requests:
                if shard in replies or now < deadline[shard]:
                    continue
                if pending.patient and links is not None and links.down(shard):
                    deadline[shard] = now + pending.timeout_s  # being restarted: its return resends (above)
                    continue
                if attempts[shard] >= pending.max_retries:
                    raise RequestFailed(f"shard {shard} ({self.conns.addresses[shard]}) did not answer "
                                        f"after {attempts[shard] + 1} attempts of {pending.timeout_s:g}s")
                attempts[shard] += 1
                self.resends += 1
                self.conns.send(shard, requests[shard])
                deadline[shard] = now + pending.timeout_s
        return replies

    def _follow_links(self, pending: "Pending", now: float) -> None:
        """Resend at once to each shard whose connection came back while its request was
        outstanding: what it had received died with it (same request id and seq, so a
        shard that did apply it recognises the repeat). Not an attempt: nothing timed out."""
        if self.conns.links is None:
            return
        for shard, link in self.conns.links.changes():
            if link is Link.UP and shard in pending.requests and shard not in pending.replies:
                self.failovers += 1
                self.conns.send(shard, pending.requests[shard])
                pending.deadline[shard] = now + pending.timeout_s


class Pending:
    """A call whose requests are on their way: the replies so far, attempts and deadlines."""

    def __init__(self, requests: dict, want: dict, deadline: dict, timeout_s: float, max_retries: int,
                 interruptible: bool, patient: bool = True):
        self.requests, self.want, self.deadline = requests, want, deadline
        self.timeout_s, self.max_retries, self.interruptible = timeout_s, max_retries, interruptible
        self.patient = patient
        self.replies: dict[int, tuple[P.Record, list]] = {}
        self.attempts = dict.fromkeys(requests, 0)

    def merged(self, other: "Pending") -> "Pending":
        """This call and `other` (to other shards) as one, to wait for together."""
        both = Pending({**self.requests, **other.requests}, {**self.want, **other.want},
                       {**self.deadline, **other.deadline}, self.timeout_s, self.max_retries, self.interruptible,
                       self.patient and other.patient)
        both.replies, both.attempts = {**self.replies, **other.replies}, {**self.attempts, **other.attempts}
        return both
