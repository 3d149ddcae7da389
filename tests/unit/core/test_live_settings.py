"""The clock-keyed settings schedule and its two-phase hold."""
import msgpack
import pytest

from psgd.config import Mode
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
    held = live.prepare(now=0.0, ttl_s=5.0, owner="a")
    assert held == 7 and live.holds(7) and live.holds(50) and not live.holds(6)
    assert live.prepare(now=0.5, ttl_s=5.0, owner="a") == 7   # a resent prepare keeps the hold
    with pytest.raises(ControlError, match="busy"):
        live.prepare(now=1.0, ttl_s=5.0, owner="b")
    with pytest.raises(ControlError, match="below the held clock"):
        live.commit(6, {"staleness": 4}, owner="a")
    live.commit(9, {"staleness": 4}, owner="a")     # another shard held 9
    assert live.hold is None and live.at(8).bound == 2 and live.at(9).bound == 4
    with pytest.raises(ControlError, match="not_prepared"):
        live.commit(12, {"staleness": 1}, owner="a")


def test_only_the_controller_holding_a_shard_commits_or_aborts_there():
    live = LiveSettings(SSP2)
    live.prepare(now=0.0, ttl_s=5.0, owner="a")
    for act in (lambda: live.commit(3, {"staleness": 7}, owner="b"), lambda: live.abort(owner="b")):
        with pytest.raises(ControlError, match="not_owner"):
            act()
        assert live.hold is not None and live.hold.owner == "a" and live.at(3).bound == 2
    assert live.abort(owner="a") and live.hold is None
    assert live.abort(owner="b") is False           # nothing held: nothing to refuse


def test_the_schedule_survives_a_state_dict_round_trip():
    live = LiveSettings(SSP2)
    live.schedule(5, {"staleness": 4}, "ctl")
    live.schedule(9, {"mode": Mode.ASP, "lr": 0.5}, "ctl")
    live.note_answered(11)
    again = LiveSettings(SSP2)
    again.load_state_dict(msgpack.unpackb(msgpack.packb(live.state_dict())))  # plain values only
    assert again.changes() == live.changes() and again.answered == 11
    assert [again.at(c) for c in (4, 5, 9, 20)] == [live.at(c) for c in (4, 5, 9, 20)]
    assert again.at(9).mode is Mode.ASP


def test_a_forgotten_hold_expires_and_answered_clocks_cannot_change():
    live = LiveSettings(SSP2)
    live.prepare(now=0.0, ttl_s=5.0, owner="a")
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
    # values that once crashed a shard (ValueError/OverflowError) or turned SSP off in silence
    ("consistency.staleness", "nan", "ssp", "bad_value"),
    ("consistency.staleness", float("nan"), "ssp", "bad_value"),
    ("consistency.staleness", "inf", "ssp", "bad_value"),
    ("consistency.staleness", "1e400", "ssp", "bad_value"),
    ("consistency.staleness", "1e18", "ssp", "bad_value"),
    ("consistency.staleness", 10**19, "asp", "bad_value"),
    ("optimizer.lr", "1e400", "ssp", "bad_value"),
    ("optimizer.lr", 10**400, "ssp", "bad_value"),
])
def test_parse_change_refuses_with_the_key(key, value, mode, code):
    with pytest.raises(ControlError) as exc:
        parse_change(key, value, mode)
    assert exc.value.code == code and key in exc.value.reason


def test_the_largest_bound_psgd_ctl_takes_is_the_configs():
    from psgd.config import ConfigError, load_config
    from psgd.config.schema import MAX_STALENESS
    assert parse_change("consistency.staleness", str(MAX_STALENESS), "ssp")["staleness"] == MAX_STALENESS
    with pytest.raises(ControlError, match=f"0..{MAX_STALENESS}"):
        parse_change("consistency.staleness", str(MAX_STALENESS + 1), "ssp")
    with pytest.raises(ConfigError, match="consistency.staleness"):
        load_config(None, ["consistency.mode=ssp", f"consistency.staleness={MAX_STALENESS + 1}"])
