"""The clock-keyed settings schedule and its two-phase hold."""
import pytest

from psgd.core.live_settings import ControlError, LiveSetting, LiveSettings, parse_change

SSP2 = LiveSetting(mode="ssp", staleness=2, auto=False, lr=0.1)


def test_changes_take_effect_at_their_clock_only():
    live = LiveSettings(SSP2)
    live.schedule(10, {"staleness": 5}, "ctl")
    live.schedule(20, {"lr": 0.01}, "ctl")
    assert [live.at(c).bound for c in (0, 9, 10, 19, 20, 500)] == [2, 2, 5, 5, 5, 5]
    assert [live.at(c).lr for c in (19, 20)] == [0.1, 0.01]
    live.schedule(15, {"mode": "asp"}, "ctl")
    assert [live.at(c).bound for c in (14, 15, 25)] == [5, None, None]
    assert live.at(25).staleness == 5 and live.at(25).lr == 0.01  # asp keeps the bound for switching back


def test_a_hand_change_of_the_bound_replaces_later_automatic_ones():
    live = LiveSettings(LiveSetting("ssp", 1, True, 0.1))
    live.schedule(8, {"staleness": 3}, "auto")
    live.schedule(16, {"staleness": 4}, "auto")
    live.schedule(12, {"staleness": 2, "auto": False}, "ctl")
    assert [live.at(c).staleness for c in (7, 8, 12, 16, 30)] == [1, 3, 2, 2, 2]
    assert [ch["origin"] for ch in live.changes()] == ["auto", "ctl"]
    live.schedule(14, {"lr": 0.5}, "ctl")   # an lr change leaves automatic bounds alone
    live.schedule(18, {"staleness": 6}, "auto")
    assert live.at(18).staleness == 6 and live.at(18).lr == 0.5


def test_max_bound_from_looks_at_every_later_change():
    live = LiveSettings(SSP2)
    live.schedule(10, {"staleness": 7}, "auto")
    live.schedule(20, {"staleness": 1}, "auto")
    assert live.max_bound_from(0) == 7 and live.max_bound_from(15) == 7 and live.max_bound_from(20) == 1


def test_two_phase_hold_and_commit():
    live = LiveSettings(SSP2)
    live.note_answered(6)
    held = live.prepare(now=0.0, ttl_s=5.0)
    assert held == 7 and live.holds(7) and live.holds(50) and not live.holds(6)
    with pytest.raises(ControlError, match="busy"):
        live.prepare(now=1.0, ttl_s=5.0)
    with pytest.raises(ControlError, match="below the held clock"):
        live.commit(6, {"staleness": 4})
    live.commit(9, {"staleness": 4})     # another shard held 9
    assert live.hold is None and live.at(8).bound == 2 and live.at(9).bound == 4
    with pytest.raises(ControlError, match="not_prepared"):
        live.commit(12, {"staleness": 1})


def test_a_forgotten_hold_expires_and_answered_clocks_cannot_change():
    live = LiveSettings(SSP2)
    live.prepare(now=0.0, ttl_s=5.0)
    assert not live.expire(4.9) and live.expire(5.0) and not live.holds(100)
    live.note_answered(30)
    with pytest.raises(ControlError, match="too_late"):
        live.schedule(30, {"staleness": 0}, "auto")
    assert live.at(30).bound == 2


@pytest.mark.parametrize("key,value,fields", [
    ("consistency.staleness", "4", {"staleness": 4, "auto": False}),
    ("consistency.staleness", 0, {"staleness": 0, "auto": False}),
    ("consistency.staleness", "auto", {"auto": True}),
    ("consistency.mode", "asp", {"mode": "asp"}),
    ("optimizer.lr", "0.02", {"lr": 0.02}),
])
def test_parse_change_accepts(key, value, fields):
    assert parse_change(key, value, "ssp") == fields


@pytest.mark.parametrize("key,value,mode,code", [
    ("optimizer.momentum", "0.9", "ssp", "bad_key"),
    ("consistency.staleness", "-1", "ssp", "bad_value"),
    ("consistency.staleness", "1.5", "ssp", "bad_value"),
    ("consistency.staleness", True, "ssp", "bad_value"),
    ("consistency.mode", "bsp", "ssp", "bad_value"),
    ("consistency.staleness", "3", "bsp", "bad_mode"),
    ("optimizer.lr", "nan", "ssp", "bad_value"),
    ("optimizer.lr", "0", "asp", "bad_value"),
    ("optimizer.lr", "fast", "bsp", "bad_value"),
])
def test_parse_change_refuses_with_the_key(key, value, mode, code):
    with pytest.raises(ControlError) as exc:
        parse_change(key, value, mode)
    assert exc.value.code == code and key in exc.value.reason
