"""psgd ctl RUN_DIR status: the live view built from the shards' status replies names the
quorum ranks at the slowest clock as the ones parked pulls wait on, and nobody when no pull
is parked; a shard's updates/s is its version's rise between the two looks."""
import pytest

from psgd.orchestrate.live_view import live_view


def _status(shard, clocks, parked, version, heard):
    return {"shard": shard, "version": version, "clocks": clocks, "quorum": list(range(len(clocks))),
            "slowest_clock": min(clocks), "last_heard_s": heard, "parked": parked}


def test_the_parked_pulls_wait_on_the_rank_behind_them():
    parked = [{"rank": 0, "clock": 8, "waiting_s": 2.5}, {"rank": 2, "clock": 8, "waiting_s": 1.0}]
    now = [_status(0, [8, 7, 8], parked, 70, [0.1, 3.0, 0.2]),
           _status(1, [8, 7, 8], parked[:1], 70, [0.3, 2.9, 0.1])]
    before = [_status(0, [8, 7, 8], parked, 66, [0.1, 2.5, 0.2]), _status(1, [8, 7, 8], [], 67, [0.1, 2.4, 0.1])]
    view = live_view(now, before, interval_s=0.5)
    assert view.waited_on == [1] and view.slowest_clock == 7
    assert [(w.clock, w.parked_clock, w.parked_s) for w in view.workers] == [(8, 8, 2.5), (7, None, 0.0), (8, 8, 1.0)]
    assert [w.last_heard_s for w in view.workers] == [0.1, 2.9, 0.1]  # the latest any shard heard
    assert [(s.parked, s.updates_per_s) for s in view.shards] == [(2, 8.0), (1, 6.0)]


def test_nobody_is_waited_on_when_no_pull_is_parked():
    view = live_view([_status(0, [5, 3, 9], [], 17, [0.1, 0.1, 0.1])])
    assert view.waited_on == [] and view.shards[0].updates_per_s is None


def test_no_reply_is_an_error():
    with pytest.raises(ValueError, match="no shard answered"):
        live_view([])
