"""psgd.core.modes.policy without sockets: the one pull rule (SSP deferral, ASP, BSP),
what a push does, release order of parked pulls, BSP aggregation, backup-worker
dropping, departures and re-joins. ConsistencyPolicy is the object shards run."""
import random

import pytest
import torch

from psgd.core.modes.policy import (
    BspAggregator,
    ClockBoard,
    ConsistencyPolicy,
    DeferredPulls,
    Mode,
    PushAction,
    PushOutcome,
)


def ssp(workers=3, s=1, **kw):
    return ConsistencyPolicy(Mode.SSP, workers, staleness=s, **kw)


def test_ssp_pull_waits_until_slowest_clock_is_within_s():
    policy = ssp(workers=3, s=1)
    board = policy.board
    assert policy.pull_ready(0, 0) and policy.pull_ready(0, 1)
    assert not policy.pull_ready(0, 2)          # min clock 0 < 2 - 1
    for rank in (0, 1):
        policy.advanced(rank, 0)
    assert not policy.pull_ready(0, 2)          # rank 2 still at clock 0
    policy.advanced(2, 0)
    assert policy.pull_ready(0, 2) and not policy.pull_ready(0, 3)
    assert board.gap(0) == 0


def test_a_pull_cannot_claim_a_clock_below_its_own_pushes():
    policy = ssp(workers=2, s=0)
    policy.advanced(0, 0)
    policy.advanced(0, 1)                       # rank 0 at clock 2, rank 1 at 0
    assert not policy.pull_ready(0, 0)          # asking for clock 0 is asking for clock 2
    assert policy.pull_ready(1, 0)


def test_ssp_zero_is_lock_step():
    policy = ssp(workers=2, s=0)
    policy.advanced(0, 0)
    assert not policy.pull_ready(0, 1)
    policy.advanced(1, 0)
    assert policy.pull_ready(0, 1)


def test_the_bound_in_force_at_the_pulls_clock_decides():
    policy = ssp(workers=2, s=1)
    policy.board.clocks[:] = [0, 0]
    policy.settings.schedule(3, {"staleness": 4}, "ctl")      # from clock 3 on the bound is 4
    policy.settings.schedule(6, {"mode": Mode.ASP}, "ctl")    # and from clock 6 on no bound at all
    assert not policy.pull_ready(0, 2)          # bound 1: 0 < 2 - 1
    assert policy.pull_ready(0, 4) and not policy.pull_ready(0, 5)  # bound 4
    assert policy.pull_ready(0, 6) and policy.pull_ready(0, 60)     # asp


def test_a_held_clock_waits_for_the_change_being_agreed():
    policy = ConsistencyPolicy(Mode.ASP, 2)
    policy.settings.note_answered(4)
    assert policy.settings.prepare(now=0.0, ttl_s=10.0, owner="ctl-1") == 5
    assert policy.pull_ready(0, 4) and not policy.pull_ready(0, 5)
    policy.settings.abort(owner="ctl-1")
    assert policy.pull_ready(0, 5)


def test_answered_pulls_record_their_gap_against_the_bound():
    policy = ssp(workers=2, s=2)
    policy.board.clocks[:] = [3, 1]
    assert policy.pull_ready(0, 3)
    assert policy.answered(0, 3) == (3, 1)
    assert policy.pulls_by_bound == {"2": 1} and policy.max_gap_over_bound == 0


def test_deferred_pulls_release_ready_ones_in_arrival_order():
    policy = ssp(workers=3, s=1)
    parked = DeferredPulls()
    # Ranks 0 and 1 ran ahead to clock 3 and 2; rank 2 and 3 are behind.
    policy = ssp(workers=4, s=1)
    policy.board.clocks[:] = [3, 2, 0, 1]
    parked.park("a", 0, 3)
    parked.park("b", 1, 2)
    parked.park("c", 3, 2)  # an older clock parked after a newer one
    assert parked.release(policy.pull_ready) == [] and len(parked) == 3
    policy.advanced(2, 0)                   # min clock 1: clock-2 pulls may go
    assert parked.release(policy.pull_ready) == ["b", "c"]
    assert len(parked) == 1
    policy.advanced(2, 1)
    policy.advanced(3, 1)                   # min clock 2: the clock-3 pull may go
    assert parked.release(policy.pull_ready) == ["a"]
    assert len(parked) == 0


def test_departure_of_the_slowest_releases_the_others():
    policy = ssp(workers=3, s=0)
    board = policy.board
    board.clocks[:] = [4, 4, 1]
    assert not policy.pull_ready(0, 4)
    assert board.depart(2) is True
    assert board.depart(2) is False         # idempotent
    assert board.quorum() == [0, 1]
    assert board.min_clock() == 4 and policy.pull_ready(0, 4)


def test_what_a_push_does_in_each_mode():
    assert ConsistencyPolicy(Mode.BSP, 2).push_action(staleness=9) is PushAction.AGGREGATE
    assert ssp(max_staleness_drop=None).push_action(staleness=50) is PushAction.APPLY
    capped = ConsistencyPolicy(Mode.ASP, 2, max_staleness_drop=3)
    assert capped.push_action(staleness=3) is PushAction.APPLY
    assert capped.push_action(staleness=4) is PushAction.DROP_STALE


def test_the_all_reduce_baseline_has_no_policy():
    with pytest.raises(ValueError, match="all-reduce"):
        ConsistencyPolicy(Mode.ALLREDUCE, 2)


def test_drop_rank_forgets_only_that_ranks_pulls():
    parked = DeferredPulls()
    parked.park("x", 0, 5)
    parked.park("y", 1, 5)
    assert parked.drop_rank(0) == ["x"]
    assert parked.release(lambda r, c: True) == ["y"]


def test_a_resent_pull_replaces_the_parked_one_and_never_piles_up():
    parked = DeferredPulls()
    assert parked.park("first", 0, 5) is None
    for k in range(20):  # a worker resending while its pull waits (an SSP wait, a ctl hold, a restart)
        assert parked.park(f"resend-{k}", 0, 5) == ("first" if k == 0 else f"resend-{k - 1}")
    parked.park("other", 1, 5)
    assert len(parked) == 2 and parked.count(0) == 1
    assert parked.release(lambda r, c: True) == ["resend-19", "other"]


def test_ssp_first_join_keeps_the_clock_the_others_wait_at():
    board = ClockBoard(3)
    board.join(0)
    board.advance(0, 0)
    board.advance(0, 1)
    board.join(2)
    board.advance(2, 0)
    assert board.join(1) == 0               # a late first registration starts at 0
    assert board.clocks == [2, 0, 1]


def test_ssp_rejoin_continues_from_the_slowest_other_worker():
    board = ClockBoard(3)
    for rank in range(3):
        board.join(rank)
    board.clocks[:] = [9, 7, 3]
    board.depart(2)
    assert board.join(2) == 7               # not 3: it would hold the others back
    assert board.clocks[2] == 7 and 2 in board.quorum()
    board.clocks[1] = 12                    # a rank ahead of the others keeps its clock
    assert board.join(1) == 12


def test_asp_never_waits():
    policy = ConsistencyPolicy(Mode.ASP, 2)
    policy.advanced(0, 99)
    assert policy.pull_ready(0, 100)
    assert policy.board.gap(0) == 100


def test_bsp_pull_waits_for_the_previous_clock_to_be_applied():
    policy = ConsistencyPolicy(Mode.BSP, 2, numel=1)
    assert policy.pull_ready(0, 0)
    assert not policy.pull_ready(0, 1)
    policy.finished(0, 0, 0, torch.ones(1))
    assert not policy.pull_ready(0, 1)          # rank 1's gradient for clock 0 is still missing
    done = policy.finished(1, 0, 0, torch.ones(1))
    assert done.update is not None and torch.equal(done.update.grad, torch.ones(1))
    assert policy.pull_ready(0, 1) and not policy.pull_ready(0, 2)


def test_bsp_rejoin_continues_at_the_step_in_progress():
    board = ClockBoard(3)
    board.clocks[:] = [6, 5, 2]
    board.depart(2)
    assert board.join(2, at=5) == 5
    assert board.clocks[2] == 5
    assert board.join(0, at=5) == 5 and board.clocks[0] == 6  # never moves back


def test_bsp_averages_the_clock_once_every_quorum_member_pushed():
    agg = BspAggregator(3)
    quorum = [0, 1, 2]
    grads = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0, 6.0]), torch.tensor([-2.0, 2.0, 1.5])]
    assert agg.add(0, 0, grads[0], quorum) is PushOutcome.BUFFERED
    assert agg.add(2, 0, grads[2], quorum) is PushOutcome.BUFFERED
    assert agg.add(1, 0, grads[1], quorum) is PushOutcome.COMPLETE
    avg = agg.take_average()
    assert torch.equal(avg, torch.tensor([1.0, 3.0, 3.5]))
    assert agg.step == 1 and agg.count == 0
    assert agg.add(0, 0, grads[0], quorum) is PushOutcome.LATE
    with pytest.raises(ValueError, match="clock 2"):
        agg.add(0, 2, grads[0], quorum)


def test_bsp_second_push_of_a_rank_in_one_clock_is_late():
    agg = BspAggregator(1)
    assert agg.add(0, 0, torch.ones(1), [0, 1]) is PushOutcome.BUFFERED
    assert agg.add(0, 0, torch.ones(1), [0, 1]) is PushOutcome.LATE
    assert agg.count == 1


def test_bsp_backup_workers_take_the_first_arrivals_and_drop_the_rest():
    agg = BspAggregator(2, backup=1)
    quorum = [0, 1, 2]
    assert agg.needed(3) == 2
    assert agg.add(2, 0, torch.tensor([2.0, 0.0]), quorum) is PushOutcome.BUFFERED
    assert agg.add(0, 0, torch.tensor([0.0, 4.0]), quorum) is PushOutcome.COMPLETE
    assert torch.equal(agg.take_average(), torch.tensor([1.0, 2.0]))
    # The straggler's gradient for the applied clock is dropped, not added to clock 1.
    assert agg.add(1, 0, torch.tensor([100.0, 100.0]), quorum) is PushOutcome.LATE
    assert agg.add(1, 1, torch.tensor([6.0, 6.0]), quorum) is PushOutcome.BUFFERED
    assert agg.add(0, 1, torch.tensor([0.0, 2.0]), quorum) is PushOutcome.COMPLETE
    assert torch.equal(agg.take_average(), torch.tensor([3.0, 4.0]))


def test_bsp_departed_contributor_does_not_make_a_member_late():
    agg = BspAggregator(1)
    assert agg.add(2, 0, torch.tensor([3.0]), [0, 1, 2]) is PushOutcome.BUFFERED
    quorum = [0, 1]                          # rank 2 timed out after pushing
    assert agg.check(quorum) is PushOutcome.BUFFERED
    assert agg.add(0, 0, torch.tensor([6.0]), quorum) is PushOutcome.BUFFERED
    assert agg.add(1, 0, torch.tensor([0.0]), quorum) is PushOutcome.COMPLETE
    assert torch.equal(agg.take_average(), torch.tensor([3.0]))  # its gradient still counts


def test_bsp_departure_completes_a_clock_that_waited_only_for_it():
    agg = BspAggregator(1)
    agg.add(0, 0, torch.tensor([2.0]), [0, 1])
    assert agg.check([0, 1]) is PushOutcome.BUFFERED
    assert agg.check([0]) is PushOutcome.COMPLETE
    assert agg.check([]) is PushOutcome.BUFFERED  # nobody left: nothing to complete for


def test_bsp_rejected_pushes_count_toward_the_quorum_but_not_the_average():
    agg = BspAggregator(1)
    assert agg.add(0, 0, None, [0, 1]) is PushOutcome.BUFFERED
    assert agg.add(1, 0, torch.tensor([5.0]), [0, 1]) is PushOutcome.COMPLETE
    assert torch.equal(agg.take_average(), torch.tensor([5.0]))
    agg.add(0, 1, None, [0, 1])
    assert agg.add(1, 1, None, [0, 1]) is PushOutcome.COMPLETE
    assert agg.take_average() is None and agg.step == 2


def test_quorum_and_min_clock_follow_every_join_depart_and_advance():
    # The board keeps its members between calls; check it against a recount after each step.
    rng = random.Random(7)
    board = ClockBoard(6)
    out = set()  # departed ranks, kept here independently
    for _ in range(500):
        rank = rng.randrange(6)
        op = rng.choice(["advance", "depart", "join", "skip"])
        if op == "advance":
            board.advance(rank, board.clocks[rank] + rng.randrange(2))
        elif op == "depart":
            board.depart(rank)
            out.add(rank)
        elif op == "join":
            board.join(rank)
            out.discard(rank)
        else:
            board.skip_to(rank, board.clocks[rank] + rng.randrange(3))
        members = [r for r in range(6) if r not in out]
        assert board.quorum() == members
        assert board.min_clock() == (min(board.clocks[r] for r in members) if members else None)
    board.departed = {0, 5}  # a checkpoint restore assigns the set
    assert board.quorum() == [1, 2, 3, 4]
