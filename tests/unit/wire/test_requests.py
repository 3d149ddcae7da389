"""Request tracking: all shards asked before any reply is awaited, ids matched, resends, errors.

The connections here are a scripted stand-in for ShardConnections (the tracker's
only collaborator), so each rule is checked without sockets or timing races.
"""
import pytest

from psgd.wire import protocol as P
from psgd.wire.requests import Interrupted, RemoteError, RequestFailed, RequestTracker
from psgd.wire.transport.link_watch import Link


class ScriptedShards:
    """Answers each request by a per-shard rule: 'ack', 'error', 'silent', or 'ack-after-resend'."""

    links = None  # no connection events: resends at the timeout only

    def __init__(self, rules):
        self.rules = rules
        self.addresses = [f"127.0.0.1:{7000 + i}" for i in range(len(rules))]
        self.sent: list[tuple[int, int]] = []   # (shard, request id) in send order
        self._inbox: list[tuple[int, list]] = []

    def send(self, shard, frames):
        req = P.request_id(frames)
        self.sent.append((shard, req))
        rule = self.rules[shard]
        attempts = sum(1 for s, r in self.sent if s == shard and r == req)
        if rule == "ack" or (rule == "ack-after-resend" and attempts == 2):
            self._inbox.append((shard, P.encode(P.Ack(req=req, version=10 + shard))))
        elif rule == "error":
            self._inbox.append((shard, P.encode(P.Error(req=req, code="bad_shape", reason="wrong size"))))
        elif rule == "stale-then-ack":
            self._inbox.append((shard, P.encode(P.Ack(req=req - 1, version=-1))))  # a late answer to an old request
            self._inbox.append((shard, P.encode(P.Ack(req=req, version=10 + shard))))
        return True

    def recv(self, timeout_ms):
        out, self._inbox = self._inbox, []
        return out


def _call(conns, tracker, shards, **kw):
    return tracker.call({s: P.encode(P.Pull(req=tracker.next_id(), rank=0)) for s in shards}, **kw)


def test_every_shard_is_asked_before_any_reply_is_read():
    conns = ScriptedShards(["ack", "ack", "ack"])
    tracker = RequestTracker(conns, timeout_s=1.0, max_retries=0)
    replies = _call(conns, tracker, [0, 1, 2])
    assert [s for s, _ in conns.sent] == [0, 1, 2]
    assert {s: rec.version for s, (rec, _) in replies.items()} == {0: 10, 1: 11, 2: 12}


def test_late_answers_to_earlier_requests_are_ignored():
    conns = ScriptedShards(["stale-then-ack"])
    tracker = RequestTracker(conns, timeout_s=1.0, max_retries=0)
    tracker.next_id()  # so the stale answer's id exists
    (rec, _), = _call(conns, tracker, [0]).values()
    assert rec.version == 10


def test_a_silent_shard_is_resent_the_same_request_id():
    conns = ScriptedShards(["ack", "ack-after-resend"])
    tracker = RequestTracker(conns, timeout_s=0.05, max_retries=2)
    replies = _call(conns, tracker, [0, 1])
    assert replies[1][0].version == 11
    assert [r for s, r in conns.sent if s == 1] == [2, 2]  # same id: the shard recognises the resend
    assert tracker.resends == 1


def test_a_shard_that_never_answers_fails_after_its_retries():
    conns = ScriptedShards(["silent"])
    tracker = RequestTracker(conns, timeout_s=0.02, max_retries=2)
    with pytest.raises(RequestFailed, match=r"shard 0 \(127.0.0.1:7000\) did not answer after 3 attempts"):
        _call(conns, tracker, [0])
    assert len(conns.sent) == 3


def test_an_error_reply_raises_with_the_shards_code_and_reason():
    conns = ScriptedShards(["ack", "error"])
    tracker = RequestTracker(conns, timeout_s=1.0, max_retries=0)
    with pytest.raises(RemoteError) as info:
        _call(conns, tracker, [0, 1])
    assert (info.value.shard, info.value.code, info.value.reason) == (1, "bad_shape", "wrong size")


def test_the_stop_condition_interrupts_a_wait_unless_told_not_to():
    conns = ScriptedShards(["ack-after-resend"])
    tracker = RequestTracker(conns, timeout_s=0.02, max_retries=3, should_stop=lambda: True)
    with pytest.raises(Interrupted):
        _call(conns, tracker, [0])
    assert _call(conns, tracker, [0], interruptible=False)[0][0].version == 10


class RestartedShard:
    """One shard that dies with the first request (its connection drops), is down for
    `down_polls` polls, then comes back on the same address and answers what it gets."""

    def __init__(self, down_polls):
        self.addresses = ["127.0.0.1:7000"]
        self.links = self
        self.sent: list[int] = []
        self._inbox: list = []
        self._changes = [(0, Link.DOWN)]
        self._down_polls = down_polls

    def send(self, shard, frames):
        self.sent.append(P.request_id(frames))
        if len(self.sent) > 1 and not self.down(0):  # the first died with the shard
            self._inbox.append((0, P.encode(P.Ack(req=P.request_id(frames), version=7))))
        return True

    def recv(self, timeout_ms):
        self._down_polls -= 1
        if self._down_polls == 0:
            self._changes.append((0, Link.UP))
        out, self._inbox = self._inbox, []
        return out

    def down(self, shard):
        return self._down_polls > 0

    @property
    def unread(self):  # LinkWatch's count of changes not yet taken
        return len(self._changes)

    def changes(self):
        out, self._changes = self._changes, []
        return out


def test_a_shard_that_comes_back_is_resent_at_once_and_its_downtime_uses_no_attempts():
    conns = RestartedShard(down_polls=50)
    tracker = RequestTracker(conns, timeout_s=0.001, max_retries=0)  # any attempt counted would fail the call
    (rec, _), = _call(conns, tracker, [0]).values()
    assert rec.version == 7
    assert conns.sent == [1, 1]  # the lost request, then the same id once the shard was back
    assert (tracker.failovers, tracker.resends) == (1, 0)


def test_a_shard_that_comes_back_is_resent_before_the_timeout():
    conns = RestartedShard(down_polls=3)
    tracker = RequestTracker(conns, timeout_s=3600.0, max_retries=0)
    assert _call(conns, tracker, [0])[0][0].version == 7
    assert tracker.failovers == 1


def test_a_call_that_is_not_patient_counts_its_attempts_while_the_shard_is_down():
    conns = RestartedShard(down_polls=10**9)
    tracker = RequestTracker(conns, timeout_s=0.001, max_retries=1)
    with pytest.raises(RequestFailed, match="after 2 attempts"):
        _call(conns, tracker, [0], patient=False)
