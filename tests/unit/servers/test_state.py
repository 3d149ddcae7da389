"""psgd.servers.state.ShardState without sockets: staleness accounting, dropping
too-stale and non-finite gradients, BSP backup workers and departures, and
workers that time out and come back."""
import pytest
import torch

from psgd.config import load_config
from psgd.servers.state import PushStatus, ShardState
from psgd.wire.protocol import ProtocolError


def make_state(mode="asp", workers=2, numel=2, **over):
    sets = [f"consistency.mode={mode}", f"cluster.workers={workers}", "optimizer.lr=0.5",
            "cluster.timeout_s=5", "cluster.heartbeat_s=1"]
    sets += [f"{k}={v}" for k, v in over.items()]
    state = ShardState(load_config(None, sets), 0, torch.zeros(numel))
    for rank in range(workers):
        state.register(rank, now=0.0)
    return state


def g(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_asp_records_staleness_as_updates_since_the_read():
    st = make_state("asp")
    assert st.push(0, 0, 0, 0, g(1, 1)).staleness == 0
    assert st.push(0, 1, 1, 1, g(1, 1)).staleness == 0
    r = st.push(1, 0, 0, 0, g(1, 1))       # computed on version 0, shard is at 2
    assert r == (r.__class__(PushStatus.APPLIED, 2))
    assert st.version == 3
    assert st.staleness_hist.as_dict() == {"0": 2, "2": 1}
    assert torch.allclose(st.params, g(-1.5, -1.5))


def test_max_staleness_drop_rejects_and_never_applies():
    st = make_state("asp", **{"optimizer.max_staleness_drop": 1})
    st.push(0, 0, 0, 0, g(1, 0))
    st.push(0, 1, 1, 1, g(1, 0))
    before = st.params.clone()
    res = st.push(1, 0, 0, 0, g(0, 8))     # staleness 2 > 1
    assert res.status is PushStatus.TOO_STALE and res.staleness == 2
    assert torch.equal(st.params, before) and st.version == 2
    assert st.counters["rejected_stale"] == 1
    assert st.board.clocks[1] == 1          # the clock still moves: the worker is not stuck
    assert st.push(1, 1, 1, 1, g(0, 2)).status is PushStatus.APPLIED  # staleness 1 is allowed
    assert st.stats()["counters"]["rejected_stale"] == 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("mode", ["asp", "ssp"])
def test_non_finite_gradients_are_counted_and_never_applied(mode, bad):
    st = make_state(mode)
    st.push(0, 0, 0, 0, g(1, 1))
    before, version = st.params.clone(), st.version
    res = st.push(1, 0, 0, 1, g(1, bad))
    assert res.status is PushStatus.NON_FINITE
    assert torch.equal(st.params, before) and st.version == version
    assert st.counters["rejected_nonfinite"] == 1
    assert st.board.clocks[1] == 1
    assert 1 not in [int(k) for k in st.staleness_hist.as_dict()]  # not counted as an update


def test_bsp_non_finite_counts_toward_the_clock_but_not_the_average():
    st = make_state("bsp")
    assert st.push(0, 0, 0, 0, g(float("nan"), 1)).status is PushStatus.NON_FINITE
    assert st.version == 0
    assert st.push(1, 0, 0, 0, g(2, 4)).status is PushStatus.BUFFERED
    assert st.version == 1 and st.bsp.step == 1
    assert torch.allclose(st.params, g(-1, -2))  # only the finite gradient, lr 0.5
    assert st.counters["rejected_nonfinite"] == 1


def test_bsp_applies_one_averaged_step_per_clock():
    st = make_state("bsp", workers=3)
    assert not st.pull_ready(0, 1)
    st.push(0, 0, 0, 0, g(1, 0))
    st.push(1, 0, 0, 0, g(2, 0))
    assert st.version == 0 and not st.pull_ready(0, 1)
    st.push(2, 0, 0, 0, g(3, 6))
    assert st.version == 1 and st.pull_ready(0, 1) and not st.pull_ready(0, 2)
    assert torch.allclose(st.params, g(-1, -1))   # mean [2, 2] * lr 0.5
    assert st.staleness_hist.as_dict() == {"0": 3}


def test_bsp_backup_worker_is_dropped_and_continues_from_the_current_step():
    st = make_state("bsp", workers=3, **{"consistency.backup_workers": 1})
    st.push(0, 0, 0, 0, g(2, 0))
    st.push(1, 0, 0, 0, g(0, 2))
    assert st.version == 1 and st.bsp.step == 1
    st.push(0, 1, 1, 1, g(2, 2))
    st.push(1, 1, 1, 1, g(2, 2))
    assert st.bsp.step == 2
    res = st.push(2, 0, 0, 0, g(100, 100))  # the straggler's clock 0 was applied long ago
    assert res.status is PushStatus.LATE
    assert st.counters["late_dropped"] == 1
    assert torch.allclose(st.params, g(-1.5, -1.5))
    # It continues at the step in progress: its next pull is answered at clock 2.
    assert st.board.clocks[2] == 2 and st.policy.pull_clock(2, 1) == 2 and st.pull_ready(2, 1)
    assert st.push(2, 1, 2, 2, g(2, 2)).status is PushStatus.BUFFERED
    assert st.bsp.count == 1


def test_bsp_timed_out_worker_leaves_the_quorum_and_the_clock_completes():
    st = make_state("bsp", workers=3)
    st.seen(0, 4.0)
    st.seen(1, 4.0)
    st.push(0, 0, 0, 0, g(2, 2))
    st.push(1, 0, 0, 0, g(4, 4))
    assert st.version == 0
    assert st.expire(now=5.5) == [2]        # rank 2 silent since t=0, timeout 5
    assert st.version == 1 and st.bsp.step == 1
    assert torch.allclose(st.params, g(-1.5, -1.5))
    assert st.counters["workers_timed_out"] == 1 and st.board.quorum() == [0, 1]
    assert st.expire(now=5.6) == []        # counted once
    with pytest.raises(ProtocolError, match="not_registered"):
        st.push(2, 0, 0, 0, g(1, 1))
    st.seen(2, 6.0)                          # a heartbeat alone does not readmit it
    assert 2 not in st.board.quorum()
    assert st.register(2, now=6.0) == 1      # back: continues at the step in progress
    assert st.board.quorum() == [0, 1, 2]
    st.push(0, 1, 1, 1, g(0, 0))
    st.push(1, 1, 1, 1, g(0, 0))
    assert st.bsp.step == 1                  # waits for the returned worker again
    st.push(2, 0, 1, 1, g(0, 0))
    assert st.bsp.step == 2


def test_bsp_rejoin_after_contributing_does_not_double_count():
    st = make_state("bsp", workers=2)
    st.push(0, 0, 0, 0, g(2, 2))
    assert st.register(0, now=1.0) == 0      # restarted before the clock completed
    assert st.push(0, 0, 0, 0, g(2, 2)).status is PushStatus.DUPLICATE
    assert st.push(0, 1, 0, 0, g(50, 50)).status is PushStatus.LATE  # a new seq for the same clock
    assert st.bsp.count == 1 and st.board.clocks[0] == 1
    st.push(1, 0, 0, 0, g(0, 0))
    assert torch.allclose(st.params, g(-0.5, -0.5))


def test_ssp_timed_out_worker_rejoins_at_the_slowest_other_clock():
    st = make_state("ssp", workers=3, **{"consistency.staleness": 1})
    for clock in range(2):
        for rank in (0, 1):
            st.push(rank, clock, clock, st.version, g(0, 0))
    assert not st.pull_ready(0, 2)           # rank 2 is at clock 0, bound 1
    for rank in (0, 1):
        st.seen(rank, 5.0)
    assert st.expire(now=5.1) == [2]
    assert st.pull_ready(0, 2) and st.pull_ready(0, 3) and not st.pull_ready(0, 4)
    assert st.register(2, now=6.0) == 2
    assert st.board.min_clock() == 2 and st.board.gap(0) == 0


def test_dc_asgd_compensates_with_the_parameters_the_worker_read():
    st = make_state("asp", **{"optimizer.dc_asgd": "{lambda: 1.0}"})
    read = st.answer_pull(1, 0)[0].clone()   # rank 1 reads w = [0, 0] (replies alias live params)
    st.push(0, 0, 0, 0, g(2, -2))            # w = [-1, 1]
    st.answer_pull(0, 1)
    res = st.push(1, 0, 0, 0, g(1, 2))       # staleness 1, drift w_now - w_read = [-1, 1]
    assert res.staleness == 1 and torch.equal(read, g(0, 0))
    # g' = g + 1.0 * g*g * drift = [1 - 1, 2 + 4] = [0, 6]; lr 0.5
    assert torch.allclose(st.params, g(-1, 1 - 3))


def test_seqs_a_shard_never_saw_are_counted_as_partial_pushes():
    # A worker killed mid-send reached another shard with seq 2; its successor continues at 3.
    state = make_state()
    for seq in (0, 1, 3):
        assert state.push(0, seq, seq, state.version, g(1.0, 1.0)).status is PushStatus.APPLIED
    assert state.counters["partial_pushes"] == 1
    state.push(1, 0, 0, state.version, g(1.0, 1.0))
    assert state.counters["partial_pushes"] == 1  # in-order pushes of another rank add nothing
