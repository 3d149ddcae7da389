"""psgd.core.rules.updater: staleness-aware steps, DC-ASGD and learning-rate schedules
against hand-computed values, and the base rules against torch.optim."""
import math

import pytest
import torch

from psgd.config import DcAsgdConfig, OptimizerConfig, ScheduleConfig
from psgd.core.rules.updater import ShardUpdater, scheduled_lr


def rule(params, **kw):
    return ShardUpdater(OptimizerConfig(**kw), params)


def test_staleness_aware_divides_the_step_by_tau():
    w = torch.tensor([1.0, -2.0])
    r = rule(w, lr=0.4, staleness_aware=True)
    g = torch.tensor([1.0, 2.0])
    r.apply(w, g, staleness=4)              # lr 0.4 / 4 = 0.1
    assert torch.allclose(w, torch.tensor([0.9, -2.2]), atol=1e-7)
    r.apply(w, g, staleness=0)              # max(1, 0): full step
    assert torch.allclose(w, torch.tensor([0.5, -3.0]), atol=1e-7)
    assert r.lr(5) == pytest.approx(0.08)


def test_staleness_is_ignored_unless_staleness_aware():
    w = torch.tensor([1.0])
    rule(w, lr=0.5).apply(w, torch.tensor([1.0]), staleness=10)
    assert w.item() == pytest.approx(0.5)


def test_dc_asgd_compensates_with_g_g_times_drift():
    w_now = torch.tensor([1.0, 2.0])
    w_read = torch.tensor([0.5, 1.0])
    g = torch.tensor([2.0, -1.0])
    r = rule(w_now, lr=0.1, dc_asgd=DcAsgdConfig(lambda_=0.5))
    r.apply(w_now, g, staleness=3, read_params=w_read)
    # g' = g + 0.5 * g*g * (w_now - w_read) = [2 + 0.5*4*0.5, -1 + 0.5*1*1] = [3, -0.5]
    assert torch.allclose(w_now, torch.tensor([1.0 - 0.3, 2.0 + 0.05]), atol=1e-7)
    assert torch.equal(g, torch.tensor([2.0, -1.0]))  # the pushed gradient is not modified


def test_dc_asgd_without_read_parameters_is_plain_sgd():
    w = torch.tensor([1.0])
    rule(w, lr=0.1, dc_asgd=DcAsgdConfig(lambda_=0.5)).apply(w, torch.tensor([2.0]))
    assert w.item() == pytest.approx(0.8)


def test_dc_asgd_and_staleness_aware_combine():
    w = torch.tensor([2.0])
    r = rule(w, lr=0.2, staleness_aware=True, dc_asgd=DcAsgdConfig(lambda_=1.0))
    r.apply(w, torch.tensor([1.0]), staleness=2, read_params=torch.tensor([1.0]))
    # g' = 1 + 1*1*1*(2-1) = 2; lr = 0.2/2 = 0.1 -> 2 - 0.2
    assert w.item() == pytest.approx(1.8)


@pytest.mark.parametrize("update,expected", [(0, 0.25), (1, 0.5), (3, 1.0), (4, 1.0), (100, 1.0)])
def test_warmup_is_linear_then_flat(update, expected):
    assert scheduled_lr(1.0, ScheduleConfig(warmup_updates=4), update) == pytest.approx(expected)


@pytest.mark.parametrize("update,expected", [(0, 0.8), (9, 0.8), (10, 0.4), (25, 0.2), (30, 0.1)])
def test_step_schedule(update, expected):
    sched = ScheduleConfig(name="step", step_size=10, gamma=0.5)
    assert scheduled_lr(0.8, sched, update) == pytest.approx(expected)


@pytest.mark.parametrize("update,expected", [(0, 1.0), (5, 0.55), (10, 0.1), (50, 0.1)])
def test_cosine_schedule(update, expected):
    sched = ScheduleConfig(name="cosine", total_updates=10, min_lr=0.1)
    assert scheduled_lr(1.0, sched, update) == pytest.approx(expected)


def test_cosine_after_warmup_starts_at_the_base_rate():
    sched = ScheduleConfig(name="cosine", warmup_updates=2, total_updates=4, min_lr=0.0)
    lrs = [scheduled_lr(1.0, sched, u) for u in range(7)]
    half = 0.5 * (1 + math.cos(math.pi * 0.25))
    assert lrs == pytest.approx([0.5, 1.0, 1.0, half, 0.5, 1 - half, 0.0])


def test_schedule_follows_the_rules_update_count():
    w = torch.zeros(1)
    r = rule(w, lr=1.0, schedule=ScheduleConfig(name="step", step_size=2, gamma=0.5))
    for _ in range(5):
        r.apply(w, torch.ones(1))
    # lr per update: 1, 1, 0.5, 0.5, 0.25
    assert w.item() == pytest.approx(-3.25)
    assert r.updates == 5


TORCH_OPTIMIZERS = [
    (dict(name="sgd", lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    (dict(name="sgd", lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (dict(name="momentum", lr=0.05), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    (dict(name="adam", lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    (dict(name="adagrad", lr=0.1, eps=1e-10), lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10)),
]


@pytest.mark.parametrize("ours,theirs", TORCH_OPTIMIZERS, ids=[o["name"] for o, _ in TORCH_OPTIMIZERS])
def test_base_rules_match_torch_optim(ours, theirs):
    g = torch.Generator().manual_seed(3)
    start = torch.randn(20, generator=g)
    grads = [torch.randn(20, generator=g) for _ in range(10)]
    w = start.clone()
    r = rule(w, **ours)
    ref = start.clone().requires_grad_(True)
    opt = theirs([ref])
    for grad in grads:
        r.apply(w, grad)
        ref.grad = grad.clone()
        opt.step()
    torch.testing.assert_close(w, ref.detach(), rtol=1e-5, atol=1e-6)
