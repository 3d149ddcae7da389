"""Elastic workers on one shard, without sockets: ranks above cluster.workers.min start
outside the quorum, enter it when they register (at the slowest member's clock under SSP,
at the step in progress under BSP) and leave it as a clock-board event. SSP's minimum clock
and BSP's barrier count a rank from its start clock on and stop counting it when it leaves;
a rank that comes back keeps its push sequence (exactly once)."""
import torch

from psgd.config import load_config
from psgd.servers.service import PushFields, ShardService
from psgd.servers.state import PushStatus, ShardState


def service(mode, span, numel=2, **over):
    sets = [f"consistency.mode={mode}", f"cluster.workers={span}", "optimizer.lr=0.5", "cluster.timeout_s=5",
            "cluster.heartbeat_s=1"] + [f"{k}={v}" for k, v in over.items()]
    return ShardService(ShardState(load_config(None, sets), 0, torch.zeros(numel)))


def push(svc, rank, seq, clock, grad=(1.0, 1.0), pull=None):
    return svc.push(PushFields(rank, seq, clock, svc.state.version, len(grad), ahead=1 if pull else 0), 0.0,
                    torch.tensor(grad), pull)


def test_ranks_above_min_are_outside_the_first_quorum():
    svc = service("ssp", "{min: 2, max: 4}", **{"consistency.staleness": 0})
    assert svc.state.board.quorum() == [0, 1] and svc.state.board.clocks == [0, 0, 0, 0]
    for rank in (0, 1):
        svc.register(rank, 0.0)
    push(svc, 0, 0, 0)
    # Rank 0's pull for clock 1 waits for rank 1 only: ranks 2 and 3 have not joined.
    assert push(svc, 1, 0, 0, pull="p1").answers[0].clock == 1


def test_ssp_counts_a_new_rank_from_its_start_clock_and_stops_waiting_for_one_that_left():
    svc = service("ssp", "{min: 2, max: 4}", **{"consistency.staleness": 1})
    for rank in (0, 1):
        svc.register(rank, 0.0)
    push(svc, 0, 0, 0)
    assert push(svc, 0, 1, 1, pull="a").answers == []      # clock 2 needs the slowest at >= 1
    released = push(svc, 1, 0, 0)
    assert [x.token for x in released.answers] == ["a"]
    joined = svc.register(2, 0.0)
    assert joined.clock == 1 and joined.last_seq == -1      # the slowest member's clock, not 0
    assert svc.state.board.quorum() == [0, 1, 2] and svc.state.board.min_clock() == 1
    assert [x.clock for x in svc.pull(2, 1, "b", 0.0).answers] == [1]  # within the bound at once
    assert push(svc, 0, 2, 2, pull="c").answers == []      # clock 3 needs the slowest at >= 2
    assert push(svc, 1, 1, 1).answers == []                # rank 2, from its start clock 1, is the slowest now
    left = svc.leave(2)
    assert left.ranks == [2] and [x.token for x in left.answers] == ["c"]
    assert svc.state.board.quorum() == [0, 1]
    assert svc.state.version == 5 and svc.state.counters["push_applied"] == 5  # each push applied once
    assert svc.state.policy.max_gap_over_bound <= 0        # the bound held on every answered pull


def test_bsp_barrier_counts_a_joining_rank_from_the_step_in_progress_and_one_fewer_after_a_departure():
    svc = service("bsp", "{min: 2, max: 3}")
    for rank in (0, 1):
        svc.register(rank, 0.0)
    push(svc, 0, 0, 0, grad=(1.0, 0.0))
    push(svc, 1, 0, 0, grad=(3.0, 0.0))
    assert svc.state.version == 1                           # step 0: the two members only
    assert torch.equal(svc.state.params, torch.tensor([-1.0, 0.0]))  # lr 0.5 x mean 2
    assert svc.register(2, 0.0).clock == 1                  # joins at the step in progress
    push(svc, 0, 1, 1, grad=(1.0, 0.0))
    push(svc, 1, 1, 1, grad=(2.0, 0.0))
    assert svc.state.version == 1                           # step 1 waits for the new rank too
    assert push(svc, 2, 0, 1, grad=(6.0, 0.0)).result.status is PushStatus.BUFFERED
    assert svc.state.version == 2
    assert torch.equal(svc.state.params, torch.tensor([-2.5, 0.0]))  # mean of three: 3
    svc.leave(1)
    push(svc, 0, 2, 2, grad=(2.0, 0.0))
    assert svc.state.version == 2
    push(svc, 2, 1, 2, grad=(4.0, 0.0))
    assert svc.state.version == 3                           # the next step expects one fewer
    assert torch.equal(svc.state.params, torch.tensor([-4.0, 0.0]))


def test_a_rank_that_leaves_and_comes_back_keeps_its_sequence():
    svc = service("asp", "{min: 1, max: 2}")
    svc.register(0, 0.0)
    svc.register(1, 0.0)
    push(svc, 1, 0, 0)
    push(svc, 1, 1, 1)
    svc.leave(1)
    back = svc.register(1, 0.0)                             # a new process on the same rank
    assert back.last_seq == 1 and back.clock == 2
    assert push(svc, 1, 1, 1).result.status is PushStatus.DUPLICATE  # a resend is not applied again
    assert svc.state.version == 2


def test_a_plain_worker_count_keeps_every_rank_in_the_first_quorum():
    svc = service("ssp", "3")
    assert svc.state.board.quorum() == [0, 1, 2]
