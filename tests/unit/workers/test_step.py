"""The worker step that psgd.Optimizer, the worker role and the simulator all run
(workers/step.py): what backward leaves in the model, and what each step sends."""
from types import SimpleNamespace

import torch
from torch import nn

from psgd.config.local_updates import LocalConfig
from psgd.core.sharding import layout_for_module
from psgd.workers.local_rounds import LocalRounds
from psgd.workers.model_sync import ModelSync
from psgd.workers.step import Outgoing, flush_outcome, forward_backward, step_outcome
from tests.support.local_methods import method_of

TASK = SimpleNamespace(inputs=lambda x: x * 2.0, targets=lambda y: y, loss=nn.functional.cross_entropy)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)


def test_forward_backward_is_the_tasks_loss_with_its_gradients_in_the_model():
    model, twin = _model(), _model()
    x, y = _batch()
    loss = forward_backward(TASK, model, (x, y))
    want = nn.functional.cross_entropy(twin(x * 2.0), y)  # the task's inputs, then its loss
    want.backward()
    assert torch.equal(loss.detach(), want.detach())
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), twin.parameters()))


def test_a_plain_step_sends_its_gradients_as_one_step():
    grads = [torch.ones(3), torch.zeros(2)]
    out = step_outcome(None, lambda: grads)
    assert out == Outgoing(grads, 1) and out.tensors[0] is grads[0]
    assert flush_outcome(None) is None  # no rounds to flush


def test_a_local_round_sends_nothing_until_its_last_step_then_its_delta():
    model = _model()
    sync = ModelSync(model, layout_for_module(model, 2), torch.device("cpu"), pin_memory=False)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    rounds = LocalRounds(method_of(LocalConfig(steps=3), 1), sync, inner, lambda: 0.0)
    start = [t.clone() for t in sync.flat_params()]

    def gradients():
        raise AssertionError("a local step never reads the gradients")
    for step in range(3):
        model.zero_grad()
        forward_backward(TASK, model, _batch())
        out = step_outcome(rounds, gradients)
        assert (out is None) == (step < 2)
    assert out.steps == 3
    now = sync.flat_params()
    assert all(torch.equal(d, s - n) for d, s, n in zip(out.tensors, start, now))  # start - end, per shard


def test_a_flush_sends_a_shorter_round_and_nothing_once_it_is_sent():
    model = _model()
    sync = ModelSync(model, layout_for_module(model, 1), torch.device("cpu"), pin_memory=False)
    rounds = LocalRounds(method_of(LocalConfig(steps=5), 1), sync, torch.optim.SGD(model.parameters(), lr=0.1),
                         lambda: 0.0)
    assert flush_outcome(rounds) is None  # no step taken yet
    forward_backward(TASK, model, _batch())
    assert step_outcome(rounds, lambda: []) is None
    out = flush_outcome(rounds)
    assert out.steps == 1 and out.tensors[0].abs().sum() > 0
    rounds.begin()  # the reply starts the next round
    assert flush_outcome(rounds) is None
