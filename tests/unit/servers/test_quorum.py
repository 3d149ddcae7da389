"""Quorum merging (consistency.quorum) on one shard, without sockets: q of W deltas
merge without waiting, a latecomer's delta lands in the next merge and is counted,
deltas weigh by their examples (exact arithmetic), a resent delta counts once, and
the grace window closes on the caller's clock, at its deadline and not before.

The outer rule is local SGD at outer_lr 1 (params -= merged mean), so every
expected value is the weighted mean computed here in float64 from the deltas."""
import numpy as np
import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.config.quorum import QuorumConfig
from psgd.core.quorum import grace_for
from psgd.servers.service import PushFields, ShardService
from psgd.servers.state import PushStatus, ShardState

BATCH = 4


def make(workers=3, size=2, grace="0", numel=3, **over):
    sets = ["consistency.mode=bsp", f"cluster.workers={workers}", "local.steps=2", f"task.batch_size={BATCH}",
            f"consistency.quorum.size={size}", f"consistency.quorum.grace_s={grace}"]
    sets += [f"{k}={v}" for k, v in over.items()]
    svc = ShardService(ShardState(load_config(None, sets), 0, torch.zeros(numel)))
    for rank in range(workers):
        svc.register(rank, 0.0)
    return svc


def push(svc, rank, seq, clock, delta, steps=2, now=0.0, pull=None, read=None):
    read = svc.state.version if read is None else read
    return svc.push(PushFields(rank, seq, clock, read, len(delta), steps=steps,
                               ahead=1 if pull else 0), now, lambda: torch.tensor(delta), pull)


def merged(deltas_and_steps):
    """sum(n_i d_i) / sum(n_i), n_i = steps_i x batch, in float64."""
    n = [s * BATCH for _, s in deltas_and_steps]
    total = sum(ni * torch.tensor(d, dtype=torch.float64) for ni, (d, _) in zip(n, deltas_and_steps))
    return total / sum(n)


def test_q_of_w_merges_at_the_qth_delta_without_waiting():
    svc = make(workers=3, size=2)
    assert push(svc, 0, 0, 0, [1.0, 2.0, 4.0], pull="p0").answers == []
    second = push(svc, 1, 0, 0, [3.0, -2.0, 8.0], pull="p1")
    assert svc.state.version == 1 and svc.deadline() is None  # no grace: merged at the q-th
    assert [a.token for a in second.answers] == ["p0", "p1"]
    expected = -merged([([1.0, 2.0, 4.0], 2), ([3.0, -2.0, 8.0], 2)])
    assert torch.equal(svc.state.params.double(), expected)


def test_a_latecomers_delta_lands_in_the_next_merge_and_is_counted():
    svc = make(workers=3, size=2)
    d0, d1, late = [1.0, 2.0, 4.0], [3.0, -2.0, 8.0], [8.0, 16.0, -4.0]
    push(svc, 0, 0, 0, d0)
    push(svc, 1, 0, 0, d1)
    first = svc.state.params.clone()
    result = push(svc, 2, 0, 0, late, pull="p2", read=0).result
    assert result.status is PushStatus.CARRIED
    assert svc.state.counters["quorum_carried"] == 1 and svc.state.counters["push_carried"] == 1
    assert svc.state.version == 1 and torch.equal(svc.state.params, first)  # held for the next merge
    assert svc.state.board.clocks[2] == 1  # it continues in the round in progress
    e0, e1 = [2.0, 0.0, 1.0], [-1.0, 4.0, 2.0]
    push(svc, 0, 1, 1, e0, steps=1)
    push(svc, 1, 1, 1, e1, steps=1)
    assert svc.state.version == 2
    expected = first.double() - merged([(late, 2), (e0, 1), (e1, 1)])  # 8 + 4 + 4 examples
    assert torch.equal(svc.state.params.double(), expected)
    assert svc.state.staleness_hist.as_dict() == {"0": 4, "1": 1}  # the late delta read version 0, merged at 1


def test_deltas_weigh_by_the_examples_they_carry():
    svc = make(workers=2, size=2)
    a, b = [1.0, 2.0, -4.0], [3.0, -2.0, 8.0]
    push(svc, 0, 0, 0, a, steps=1)   # 4 examples
    push(svc, 1, 0, 0, b, steps=3)   # 12 examples
    expected = -merged([(a, 1), (b, 3)])
    assert torch.equal(svc.state.params.double(), expected)
    assert not torch.equal(expected, -(torch.tensor(a, dtype=torch.float64) + torch.tensor(b)) / 2)  # not the plain mean


def test_a_resent_delta_counts_once():
    svc = make(workers=2, size=2)
    a, b = [1.0, 2.0, 4.0], [3.0, -2.0, 8.0]
    assert push(svc, 0, 0, 0, a).result.status is PushStatus.BUFFERED
    assert push(svc, 0, 0, 0, a).result.status is PushStatus.DUPLICATE  # the same seq again: a resend
    assert svc.state.version == 0  # a resend is not the second worker of the quorum
    push(svc, 1, 0, 0, b)
    assert svc.state.counters["duplicates"] == 1
    assert torch.equal(svc.state.params.double(), -merged([(a, 2), (b, 2)]))


def test_the_grace_window_closes_at_its_deadline_on_the_callers_clock():
    svc = make(workers=3, size=2, grace="0.5")
    push(svc, 0, 0, 0, [1.0, 1.0, 1.0], now=0.0, pull="p0")
    push(svc, 1, 0, 0, [3.0, 3.0, 3.0], now=0.1, pull="p1")
    assert svc.state.version == 0 and svc.deadline() == pytest.approx(0.6)
    assert not svc.tick(0.59).closed and svc.state.version == 0
    ticked = svc.tick(0.6)
    assert ticked.closed and svc.state.version == 1 and [a.token for a in ticked.answers] == ["p0", "p1"]
    assert svc.state.counters["quorum_closed_by_grace"] == 1 and svc.deadline() is None


def test_everyone_in_before_the_deadline_merges_at_once():
    svc = make(workers=3, size=2, grace="0.5")
    push(svc, 0, 0, 0, [1.0, 1.0, 1.0], now=0.0)
    push(svc, 1, 0, 0, [3.0, 3.0, 3.0], now=0.1)
    push(svc, 2, 0, 0, [5.0, 5.0, 5.0], now=0.3)  # within the window: merged on time
    assert svc.state.version == 1 and svc.deadline() is None
    assert svc.state.counters["quorum_carried"] == 0
    assert svc.state.grace.lags[-1] == pytest.approx(0.2)  # its lag after the q-th, for the adaptive rule


def test_a_departure_that_leaves_q_members_opens_the_window():
    svc = make(workers=3, size=3, grace="0.5")
    push(svc, 0, 0, 0, [1.0, 1.0, 1.0], now=0.0)
    push(svc, 1, 0, 0, [3.0, 3.0, 3.0], now=0.1)
    left = svc.leave(2, now=0.2)  # the rest of the quorum is in: nobody is left to wait for
    assert svc.state.version == 1 and left.ranks == [2]


@pytest.mark.parametrize("lags", [[0.1, 0.2, 5.0], [0.3, 0.05, 0.2, 0.9, 0.4], [7.0], []])
def test_the_adaptive_grace_is_a_bounded_quantile_of_the_catchable_lags(lags):
    q = QuorumConfig(size=2, grace_s="auto", quantile=0.8, grace_min_s=0.01, grace_max_s=1.0)
    catchable = [lag for lag in lags if lag <= q.grace_max_s]
    want = (float(np.quantile(catchable, q.quantile, method="inverted_cdf")) if catchable else q.grace_min_s)
    assert grace_for(q, lags) == min(q.grace_max_s, max(q.grace_min_s, want))
    assert grace_for(QuorumConfig(size=2, grace_s=0.25), lags) == 0.25


@pytest.mark.parametrize("sets, key", [
    (["consistency.mode=asp", "local.steps=2", "consistency.quorum.size=2"], "consistency.quorum"),
    (["consistency.mode=bsp", "consistency.quorum.size=2"], "consistency.quorum"),
    (["consistency.mode=bsp", "local.steps=2", "consistency.quorum.size=9"], "consistency.quorum.size"),
    (["consistency.mode=bsp", "local.steps=2", "consistency.quorum.grace_s=-1"], "consistency.quorum.grace_s"),
    (["consistency.mode=bsp", "local.steps=2", "consistency.quorum.quantile=0"], "consistency.quorum.quantile"),
    (["consistency.mode=bsp", "local.steps=2", "consistency.quorum.grace_max_s=-1"],
     "consistency.quorum.grace_max_s"),
    (["consistency.mode=bsp", "local.steps=2", "consistency.backup_workers=1", "consistency.quorum.size=2"],
     "consistency.quorum"),
])
def test_bad_quorum_settings_fail_naming_the_key(sets, key):
    with pytest.raises(ConfigError) as err:
        load_config(None, sets)
    assert err.value.key == key and "\n" not in str(err.value)


def test_weights_stay_exact_over_many_deltas():
    """The rescaled sum keeps sum(n_i d_i) exactly where the values allow it."""
    svc = make(workers=4, size=4, numel=2)
    deltas = [([1.0, -2.0], 1), ([4.0, 8.0], 3), ([-16.0, 2.0], 2), ([0.5, 0.25], 2)]  # 32 examples
    for rank, (d, steps) in enumerate(deltas):
        push(svc, rank, 0, 0, d, steps=steps)
    assert svc.state.version == 1
    assert torch.equal(svc.state.params.double(), -merged(deltas))


def test_the_push_log_keeps_each_deltas_steps_and_the_closes(tmp_path):
    """A restarted shard replays the log: the weights (steps) and the grace windows' closes
    must come back, or its merges would differ from the ones it acknowledged."""
    from psgd.servers.push_log import OP_CLOSE, OP_PUSH, PushLogWriter, read_log
    log = PushLogWriter(tmp_path / "shard-0.log.0")
    log.push(0, 0, 0, 0, torch.tensor([1.0, 2.0]), 0.5, steps=3)
    log.close_round()
    log.close()
    records = list(read_log(tmp_path / "shard-0.log.0"))
    assert [(r.op, r.steps) for r in records] == [(OP_PUSH, 3), (OP_CLOSE, 1)]


def test_a_restarted_shard_restores_a_half_merged_round_from_its_snapshot_and_log(tmp_path):
    """Snapshot with a round half in (its weighted sum, who was on time, the closing flag),
    then the log's pushes with their steps and a close: the restart merges what the live one did."""
    from psgd.servers.checkpoint import ShardCheckpoint
    live = make(workers=3, size=2, grace="0.5")
    ckpt = ShardCheckpoint(tmp_path, 0, "fp", live.state.cfg.checkpoint)
    ckpt.resume(live.state)
    for r in range(3):
        ckpt.log_join(r)
    rounds = [[([1.0, 2.0, 4.0], 1), ([3.0, -2.0, 8.0], 3)], [([2.0, 0.5, 1.0], 2), ([-1.0, 4.0, 2.0], 2)]]
    for clock, deltas in enumerate(rounds):
        for rank, (d, steps) in enumerate(deltas):
            push(live, rank, clock, clock, d, steps=steps, now=clock + 0.1 * rank)
            ckpt.log_push(rank, clock, clock, live.state.version, torch.tensor(d), 0.0, steps)
            if (clock, rank) == (1, 0):
                ckpt.save(live.state)  # round 1 half in: only the log has the rest
        assert live.tick(clock + 1.0).closed
        ckpt.log_close()
    back = make(workers=3, size=2, grace="0.5")
    info = ShardCheckpoint(tmp_path, 0, "fp", back.state.cfg.checkpoint).resume(back.state)
    assert info["replayed"] == 2 and back.state.version == live.state.version == 2
    assert torch.equal(back.state.params, live.state.params)


def test_a_rank_already_on_time_for_a_round_is_late_when_it_pushes_that_round_again():
    """The same round under the next seq (not a resend): bsp answers LATE, and so must a quorum,
    or the rank's round weighs twice: p0 - (2 d0 + d1) / 3 instead of p0 - (d0 + d1) / 2."""
    svc = make(workers=2, size=2)
    d0, again, d1 = [1.0, 2.0, 4.0], [5.0, -3.0, 0.5], [3.0, -2.0, 8.0]
    assert push(svc, 0, 0, 0, d0).result.status is PushStatus.BUFFERED
    assert push(svc, 0, 1, 0, again).result.status is PushStatus.LATE
    push(svc, 1, 0, 0, d1)
    assert svc.state.version == 1 and svc.state.counters["late_dropped"] == 1
    assert torch.equal(svc.state.params.double(), -merged([(d0, 2), (d1, 2)]))
    assert svc.state.board.clocks[0] == 1  # it continues with the round in progress


def test_a_successor_repeating_a_round_one_shard_already_has_is_dropped_there():
    """Two shards: rank 0's push for round 0 reaches shard 0 only, the worker dies, and its
    successor adopts the lowest shard clock (shard 1's 0) and pushes round 0 to both again:
    shard 0 drops it as late (PushCursor.adopt's rule), shard 1 takes it."""
    shards = [make(workers=2, size=2, numel=2) for _ in range(2)]
    first, successor, other = [[1.0, 2.0], [4.0, -1.0]], [[8.0, -4.0], [2.0, 6.0]], [[3.0, -2.0], [0.5, 1.0]]
    push(shards[0], 0, 0, 0, first[0])  # shard 1 never got it
    for svc in shards:
        svc.register(0, 1.0)  # the successor registers again (the same session rank)
    assert min(svc.state.board.clocks[0] for svc in shards) == 0
    assert push(shards[0], 0, 1, 0, successor[0]).result.status is PushStatus.LATE
    assert push(shards[1], 0, 1, 0, successor[1]).result.status is PushStatus.BUFFERED
    for s, svc in enumerate(shards):
        push(svc, 1, 0, 0, other[s])
        assert svc.state.version == 1
    assert torch.equal(shards[0].state.params.double(), -merged([(first[0], 2), (other[0], 2)]))
    assert torch.equal(shards[1].state.params.double(), -merged([(successor[1], 2), (other[1], 2)]))


def test_a_rank_that_pushed_a_merged_round_is_late_when_it_pushes_it_again():
    """Round 0 merged with rank 0's delta in it: a second push for round 0 from rank 0 is a
    duplicate, not a latecomer to carry into round 1 (a real latecomer is carried: above)."""
    svc = make(workers=3, size=2)
    push(svc, 0, 0, 0, [1.0, 2.0, 4.0])
    push(svc, 1, 0, 0, [3.0, -2.0, 8.0])
    assert svc.state.version == 1
    assert push(svc, 0, 1, 0, [9.0, 9.0, 9.0], read=0).result.status is PushStatus.LATE
    assert svc.state.counters["quorum_carried"] == 0


def test_stats_keep_the_quorum_members_beside_the_grace_figures():
    svc = make(workers=3, size=2, grace="0.5")
    stats = svc.state.stats()
    assert stats["quorum"] == [0, 1, 2]
    assert stats["quorum_grace"] == svc.state.grace.describe()
