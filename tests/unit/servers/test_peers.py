"""The shard's authorisation table: ranks are bound to connections, takeovers
need the run token (and the same Curve key), heartbeats need the session."""
from __future__ import annotations

import pytest

from psgd.servers.peers import MAX_AHEAD, PeerTable, check_ahead
from psgd.wire.protocol import ProtocolError


def test_rank_is_bound_to_its_connection():
    t = PeerTable(run_token="tok")
    session = t.register(b"a", "worker", 0)
    t.check_worker(b"a", 0)
    with pytest.raises(ProtocolError) as err:
        t.check_worker(b"b", 0)
    assert err.value.code == "not_registered"
    with pytest.raises(ProtocolError) as err:
        t.register(b"b", "worker", 0)
    assert err.value.code == "rank_bound"
    t.check_worker(b"a", 0)  # a refused takeover changes nothing
    assert t.heartbeat_ok(0, session) and not t.heartbeat_ok(0, "") and not t.heartbeat_ok(0, "x" * 32)


def test_takeover_with_the_run_token_moves_the_binding():
    t = PeerTable(run_token="tok")
    old = t.register(b"a", "worker", 0)
    new = t.register(b"b", "worker", 0, token="tok")
    assert new != old and t.heartbeat_ok(0, new) and not t.heartbeat_ok(0, old)
    t.check_worker(b"b", 0)
    with pytest.raises(ProtocolError):
        t.check_worker(b"a", 0)
    with pytest.raises(ProtocolError):
        t.register(b"c", "worker", 0, token="wrong")


def test_curve_key_must_match_even_with_the_token():
    t = PeerTable(run_token="tok")
    t.register(b"a", "worker", 0, key="K1")
    with pytest.raises(ProtocolError):
        t.register(b"b", "worker", 0, key="K2", token="tok")
    t.register(b"b", "worker", 0, key="K1", token="tok")
    t.check_worker(b"b", 0)


def test_same_connection_re_registers_and_keeps_its_session():
    t = PeerTable()
    s1 = t.register(b"a", "worker", 0)
    assert t.register(b"a", "worker", 0) == s1


def test_released_rank_is_free_without_a_token():
    t = PeerTable()
    t.register(b"a", "worker", 0)
    t.release(0)
    with pytest.raises(ProtocolError):
        t.check_worker(b"a", 0)
    t.register(b"b", "worker", 0)
    t.check_worker(b"b", 0)


def test_evaluator_cannot_act_as_a_worker_or_stop_anything():
    t = PeerTable(run_token="tok")
    t.register(b"e", "evaluator", 0)
    with pytest.raises(ProtocolError) as err:
        t.check_worker(b"e", 0)
    assert err.value.code == "bad_rank"
    assert not t.may_shut_down(b"e", "")
    assert t.may_shut_down(b"stranger", "tok") and not t.may_shut_down(b"stranger", "tok2")
    untokened = PeerTable()
    untokened.register(b"e", "evaluator", 0)
    untokened.register(b"w", "worker", 1)
    assert not untokened.may_shut_down(b"e", "") and untokened.may_shut_down(b"w", "")
    assert not untokened.may_shut_down(b"x", "anything")


def test_forget_releases_what_the_connection_held():
    t = PeerTable()
    t.register(b"a", "worker", 3)
    assert t.forget(b"a") == ("worker", 3)
    assert 3 not in t.ranks and t.role_of(b"a") is None


def test_check_ahead_bounds():
    check_ahead("seq", 5 + MAX_AHEAD, 5)
    for bad in (6 + MAX_AHEAD, 2**63):
        with pytest.raises(ProtocolError) as err:
            check_ahead("seq", bad, 5)
        assert err.value.code == "bad_seq"
