"""psgd.servers.service without sockets: the one method per request that the shard
and the simulator both call. Parked pulls come back from the request that made
them ready, in arrival order; skipping the look while nothing moved answers
exactly what looking every time answers; a rank that leaves is forgotten once."""
import ast
import random
from pathlib import Path

import pytest
import torch

from psgd.config import load_config
from psgd.servers.service import PushFields, ShardService
from psgd.servers.state import ShardState
from psgd.wire.protocol import ErrorCode, ProtocolError

ROOT = Path(__file__).resolve().parents[3]


def make_service(mode="ssp", workers=3, numel=2, cls=ShardService, **over):
    sets = [f"consistency.mode={mode}", f"cluster.workers={workers}", "optimizer.lr=0.5", "cluster.timeout_s=5",
            "cluster.heartbeat_s=1"] + [f"{k}={v}" for k, v in over.items()]
    service = cls(ShardState(load_config(None, sets), 0, torch.zeros(numel)))
    for rank in range(workers):
        assert service.register(rank, 0.0).answers == []
    return service


def push(service, rank, seq, clock, grad=(1.0, 1.0), pull=None, **fields):
    return service.push(PushFields(rank, seq, clock, service.state.version, len(grad), ahead=1 if pull else 0,
                                   **fields), 0.0, torch.tensor(grad), pull)


def test_a_parked_pull_is_answered_by_the_push_that_makes_it_ready():
    svc = make_service("ssp", workers=2, **{"consistency.staleness": 0})
    first = push(svc, 0, 0, 0, pull="p0")           # rank 0's pull for clock 1 waits for rank 1's clock 0
    assert first.answers == [] and svc.state.counters["pulls_deferred"] == 1
    second = push(svc, 1, 0, 0, pull="p1")
    assert [(a.token, a.rank, a.clock, a.min_clock, a.version) for a in second.answers] == \
        [("p0", 0, 1, 1, 2), ("p1", 1, 1, 1, 2)]    # the released pull first, then the request's own
    assert svc.state.counters["push_applied"] == 2


def test_a_leaving_worker_has_its_parked_pull_refused_and_releases_the_others():
    svc = make_service("bsp", workers=3)
    push(svc, 0, 0, 0, pull="p0")
    push(svc, 1, 0, 0, pull="p1")
    push(svc, 2, 0, 0, pull="p2")                   # clock 0 is applied: every pull is answered
    assert svc.state.version == 1 and not len(svc.parked)
    push(svc, 0, 1, 1, pull="q0")
    push(svc, 2, 1, 1, pull="q2")                   # both wait for rank 1's clock-1 gradient
    left = svc.leave(1)
    assert left.ranks == [1] and left.refused == []
    assert [a.token for a in left.answers] == ["q0", "q2"] and svc.state.version == 2
    push(svc, 0, 2, 2, pull="r0")                   # waits for rank 2
    gone = svc.leave(0)
    assert gone.refused == ["r0"] and gone.answers == []


def test_answers_carry_the_fastest_step_time_of_the_workers_still_in_the_quorum():
    svc = make_service("asp", workers=2)
    assert push(svc, 0, 0, 0, pull="a", step_s=0.4, steps=2).answers[0].fastest_step_s == 0.2
    assert push(svc, 1, 0, 0, pull="b", step_s=0.1).answers[0].fastest_step_s == 0.1
    svc.leave(1)
    assert push(svc, 0, 1, 1, pull="c", step_s=0.2, steps=2).answers[0].fastest_step_s == pytest.approx(0.17)


def test_the_field_checks_come_first_and_leave_the_state_untouched():
    svc = make_service("asp", workers=2)
    for fields, code in [({"scale": 0.0}, ErrorCode.BAD_FIELD), ({"steps": 0}, ErrorCode.BAD_FIELD),
                         ({"step_s": float("nan")}, ErrorCode.BAD_FIELD), ({"slot": 99}, ErrorCode.BAD_FIELD)]:
        with pytest.raises(ProtocolError) as err:
            push(svc, 0, 0, 0, pull="x", **fields)
        assert err.value.code == code
    with pytest.raises(ProtocolError) as err:
        svc.check_push(PushFields(0, 0, 0, 0, numel=5))  # what the shard asks before it decodes the payload
    assert err.value.code == ErrorCode.BAD_SIZE
    assert svc.state.version == 0 and svc.state.last_seq == [-1, -1]


class AlwaysLook(ShardService):
    """The reference: every request looks at every parked pull."""

    def _release(self, now, by=None):
        return [self._answer(*parked) for parked in self.parked.release(self.state.pull_ready)]


@pytest.mark.parametrize("mode,over", [("ssp", {"consistency.staleness": 1}), ("ssp", {"consistency.staleness": 0}),
                                       ("bsp", {}), ("bsp", {"consistency.backup_workers": 1})])
def test_skipping_the_look_answers_exactly_what_looking_every_time_answers(mode, over):
    for seed in range(6):
        rng = random.Random(seed)
        fast, ref = make_service(mode, workers=4, **over), make_service(mode, workers=4, cls=AlwaysLook, **over)
        seq, clock = [0] * 4, [0] * 4
        active, waiting = set(range(4)), set()  # waiting: its pull is parked
        released = 0
        for _ in range(150):
            free = sorted(active - waiting)
            if len(active) < 4 and rng.random() < 0.3:  # a worker comes back
                rank = rng.choice(sorted(set(range(4)) - active))
                outs = [svc.register(rank, 0.0) for svc in (fast, ref)]
                clock[rank] = outs[0].clock
                active.add(rank)
            elif not free or (rng.random() < 0.05 and len(active) > 1):  # one leaves (or times out)
                rank = rng.choice(sorted(active))
                outs = [svc.leave(rank) for svc in (fast, ref)]
                active.discard(rank)
                waiting.discard(rank)
            else:
                rank = rng.choice(free)
                grad = (rng.random(), 1.0)
                outs = [push(svc, rank, seq[rank], clock[rank], grad, pull=(rank, seq[rank])) for svc in (fast, ref)]
                seq[rank] += 1
                waiting.add(rank)
            got = [[(a.token, a.clock, a.min_clock, a.version) for a in out.answers] + [("refused", out.refused)]
                   for out in outs]
            assert got[0] == got[1]
            for answer in outs[0].answers:
                waiting.discard(answer.rank)
                clock[answer.rank] = answer.clock
                released += answer.token != (rank, seq[rank] - 1)  # not the request's own pull
        assert torch.equal(fast.state.params, ref.state.params)
        assert released > 10  # pulls were parked and came back from later requests


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
    return names


def test_neither_the_shard_loop_nor_the_simulator_keeps_the_request_rules_of_its_own():
    """Parking, readiness, speeds and answering pulls are the service's: the shard's
    socket loop and the simulator's serving code only call it."""
    kept = {"DeferredPulls", "StepSpeeds", "pull_ready", "answer_pull", "readiness", "check_ahead", "MAX_LOCAL_STEPS"}
    for path in [ROOT / "servers" / "shard.py", ROOT / "psgd" / "sim" / "engine.py", ROOT / "psgd" / "sim" / "executor.py"]:
        assert not (_calls(path) & kept), f"{path.name} uses {sorted(_calls(path) & kept)}"


# ---- pull waits (servers/pull_waits.py): how long pulls stayed parked, and whom they waited on ----

def _push(svc, rank, seq, clock, now):
    return svc.push(PushFields(rank, seq, clock, svc.state.version, 2, ahead=1), now,
                    torch.ones(2), (rank, seq))


def test_the_barrier_wait_is_charged_to_the_last_pusher_to_the_second():
    svc = make_service("bsp", workers=3)
    assert _push(svc, 0, 0, 0, now=1.0).answers == []   # parked at 1.0
    assert _push(svc, 1, 0, 0, now=2.5).answers == []   # parked at 2.5
    assert [w["rank"] for w in svc.waits.open(now=3.0)] == [0, 1]
    assert [w["waiting_s"] for w in svc.waits.open(now=3.0)] == [2.0, 0.5]
    released = _push(svc, 2, 0, 0, now=4.0)              # rank 2 arrives last: the barrier opens
    assert sorted(a.rank for a in released.answers) == [0, 1, 2]
    assert {a.rank: a.held_s for a in released.answers} == {0: 3.0, 1: 1.5, 2: 0.0}  # what each reply says
    totals = svc.waits.totals()
    assert totals["held_s"] == [3.0, 1.5, 0.0]          # its own pull was answered at once
    assert totals["waited_on_s"] == [0.0, 0.0, 4.5]
    assert svc.waits.open(now=5.0) == []


def test_under_asp_no_pull_is_parked_and_nobody_is_waited_on():
    svc = make_service("asp", workers=2)
    for seq in range(3):
        for rank in range(2):
            assert len(_push(svc, rank, seq, seq, now=float(seq)).answers) == 1
    assert svc.waits.totals() == {"held_s": [0.0, 0.0], "waited_on_s": [0.0, 0.0]}


def test_a_rank_that_leaves_releases_the_others_and_is_charged_with_their_wait():
    svc = make_service("bsp", workers=2)
    _push(svc, 0, 0, 0, now=0.0)
    released = svc.leave(1, now=2.0)
    assert [a.rank for a in released.answers] == [0]
    assert svc.waits.totals() == {"held_s": [2.0, 0.0], "waited_on_s": [0.0, 2.0]}


def test_status_reads_the_clocks_and_parked_pulls_and_changes_nothing():
    svc = make_service("bsp", workers=3)
    _push(svc, 0, 0, 0, now=1.0)
    _push(svc, 2, 0, 0, now=1.5)
    before = (list(svc.state.board.clocks), svc.state.version, len(svc.parked))
    status = svc.status(now=2.0)
    assert (status["clocks"], status["slowest_clock"]) == ([1, 0, 1], 0)
    assert status["parked"] == [{"rank": 0, "clock": 1, "waiting_s": 1.0}, {"rank": 2, "clock": 1, "waiting_s": 0.5}]
    assert status["last_heard_s"] == [1.0, 2.0, 0.5]   # rank 1 was last heard at its registration (t=0)
    assert (list(svc.state.board.clocks), svc.state.version, len(svc.parked)) == before
