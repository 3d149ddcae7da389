"""A push whose gradient or delta is finite but whose update would overflow float32
(four deltas of 1e38 under the DiLoCo outer rule) is refused, counted, and leaves the
parameters and the optimizer state exactly as they were."""
import pytest
import torch

from psgd.config import load_config
from psgd.servers.state import PushStatus, ShardState

DILOCO = ["local.steps=4", "local.outer_lr=0.7", "local.outer_momentum=0.9", "local.outer_nesterov=true"]


def make_state(mode, sets, workers=4, numel=6):
    cfg = load_config(None, [f"consistency.mode={mode}", f"cluster.workers={workers}", *sets])
    state = ShardState(cfg, 0, torch.linspace(-1, 1, numel))
    for rank in range(workers):
        state.register(rank, now=0.0)
    return state


def snapshot(state):
    return state.params.clone(), {k: v.clone() for k, v in state.rule.state.items()}, state.rule.updates


def assert_unchanged(state, before):
    params, rule_state, updates = before
    assert torch.equal(state.params, params)
    assert rule_state.keys() == state.rule.state.keys()
    assert all(torch.equal(state.rule.state[k], v) for k, v in rule_state.items())
    assert state.rule.updates == updates


HUGE = 1e38


@pytest.mark.parametrize("mode", ["asp", "ssp"])
def test_finite_deltas_that_would_overflow_the_outer_momentum_are_refused(mode):
    st = make_state(mode, DILOCO)
    delta = torch.full((6,), HUGE)
    statuses = []
    for rank in range(4):
        before, version = snapshot(st), st.version
        result = st.push(rank, 0, 0, 0, delta)
        statuses.append(result.status)
        if result.status is PushStatus.NON_FINITE_RESULT:
            assert_unchanged(st, before)
            assert st.version == version
        assert torch.isfinite(st.params).all() and torch.isfinite(st.rule.state["momentum_buffer"]).all()
    # Each push alone moves the buffer by 1e38 (x 0.9 decay): the buffer overflows at the fourth at the latest.
    assert PushStatus.NON_FINITE_RESULT in statuses
    refused = statuses.count(PushStatus.NON_FINITE_RESULT)
    assert st.counters["rejected_nonfinite_result"] == refused
    assert st.version == 4 - refused
    # The clock still moved: a refused push does not leave its worker behind.
    assert list(st.board.clocks) == [1, 1, 1, 1]
    # A normal delta after the refusal is applied as usual.
    assert st.push(0, 1, 1, st.version, torch.full((6,), 1e-3)).status is PushStatus.APPLIED


def test_bsp_refuses_a_round_whose_summed_deltas_overflow_and_keeps_its_state():
    st = make_state("bsp", DILOCO)
    before = snapshot(st)
    results = [st.push(rank, 0, 0, 0, torch.full((6,), HUGE)) for rank in range(4)]
    assert [r.status for r in results] == [PushStatus.BUFFERED] * 3 + [PushStatus.NON_FINITE_RESULT]
    assert_unchanged(st, before)
    assert st.version == 0 and st.counters["rejected_nonfinite_result"] == 1
    assert st.bsp.step == 1  # the round is over; the next one runs normally
    assert all(st.push(rank, 1, 1, 0, torch.full((6,), 1e-3)).status is PushStatus.BUFFERED for rank in range(4))
    assert st.version == 1 and torch.isfinite(st.params).all()


@pytest.mark.parametrize("sets", [
    ["optimizer.name=adam", "optimizer.lr=0.1"],
    ["optimizer.name=adagrad", "optimizer.lr=0.1"],
    ["optimizer.name=sgd", "optimizer.lr=10"],
    ["optimizer.name=sgd", "optimizer.lr=10", "optimizer.momentum=0.9"],
], ids=["adam", "adagrad", "sgd", "momentum"])
def test_a_finite_gradient_that_would_overflow_any_rule_is_refused(sets):
    st = make_state("asp", sets, workers=1)
    st.push(0, 0, 0, 0, torch.full((6,), 1.0))
    before, version = snapshot(st), st.version
    result = st.push(0, 1, 1, version, torch.full((6,), 3e38))  # g*g overflows adam/adagrad; lr*g overflows sgd
    assert result.status is PushStatus.NON_FINITE_RESULT
    assert_unchanged(st, before)
    assert st.version == version and st.counters["rejected_nonfinite_result"] == 1


def test_a_sparse_push_that_would_overflow_its_coordinates_is_refused():
    st = make_state("asp", ["wire.compression=topk", "optimizer.lr=10"], workers=1)
    before = snapshot(st)
    indices, values = torch.tensor([1, 4, 1]), torch.tensor([3e38, 1.0, 3e38])
    assert st.push(0, 0, 0, 0, (indices, values)).status is PushStatus.NON_FINITE_RESULT
    assert_unchanged(st, before)
    assert st.push(0, 1, 1, 0, (indices, torch.tensor([1.0, 2.0, 3.0]))).status is PushStatus.APPLIED
    expected = before[0].clone()
    expected[1] -= 10 * 4.0
    expected[4] -= 10 * 2.0
    assert torch.equal(st.params, expected)
