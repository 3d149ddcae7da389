"""The non-finite guard copies nothing unless an overflow is possible: each rule's
`magnitudes` bounds every value its step produces, the bounds follow the tensors
between updates, and an update that would overflow is still refused whole."""
import math
from dataclasses import replace

import pytest
import torch

from psgd.config import load_config
from psgd.core.local_methods.optimizers import server_optimizer
from psgd.core.rules.updater import FLOAT32_MAX, ShardUpdater, abs_bound, abs_max

SETTINGS = {
    "sgd": ["optimizer.name=sgd"],
    "momentum": ["optimizer.name=momentum"],
    "nesterov": ["optimizer.name=momentum", "optimizer.nesterov=true"],
    "delayed-nesterov": ["optimizer.name=momentum"],  # momentum_period below: internal, set by async DiLoCo
    "adam": ["optimizer.name=adam"],
    "adamw": ["optimizer.name=adamw", "optimizer.weight_decay=0.1"],
    "adagrad": ["optimizer.name=adagrad"],
    "sgd-weight-decay": ["optimizer.name=sgd", "optimizer.weight_decay=0.5"],
    "dc-asgd": ["optimizer.name=sgd", "optimizer.dc_asgd.lambda=0.5"],
}


def make_rule(name, numel=64, lr=0.1):
    cfg = server_optimizer(load_config(None, [*SETTINGS[name], f"optimizer.lr={lr}"]))
    if name == "delayed-nesterov":
        cfg = replace(cfg, momentum_period=3)
    params = torch.linspace(-2, 2, numel)
    return ShardUpdater(cfg, params), params


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e6, 1e15])
def test_the_bounds_hold_over_many_steps(name, scale):
    rule, params = make_rule(name)
    gen = torch.Generator().manual_seed(7)
    read = params.clone()
    for _ in range(12):
        grad = torch.randn(params.numel(), generator=gen) * scale
        applied = rule.apply_if_finite(params, grad, read_params=read)
        assert torch.isfinite(params).all()
        if not applied or not rule._bounds:  # refused, or run on the checked path: nothing to compare
            continue
        for key, tensor in (("", params), *rule.state.items()):
            assert abs_max(tensor) <= rule._bounds[key], key
        read = params.clone()


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_ordinary_updates_copy_nothing(name):
    rule, params = make_rule(name)
    gen = torch.Generator().manual_seed(3)
    for _ in range(20):
        assert rule.apply_if_finite(params, torch.randn(params.numel(), generator=gen), read_params=params.clone())
    assert rule._kept is None  # the copy buffers were never needed


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_same_parameters_as_an_unguarded_step(name):
    guarded, p1 = make_rule(name)
    plain, p2 = make_rule(name)
    gen = torch.Generator().manual_seed(5)
    for _ in range(10):
        grad = torch.randn(p1.numel(), generator=gen)
        assert guarded.apply_if_finite(p1, grad, read_params=p1.clone())
        plain.apply(p2, grad, read_params=p2.clone())
    assert torch.equal(p1, p2)
    assert all(torch.equal(guarded.state[k], plain.state[k]) for k in plain.state)


def refused_untouched(rule, params, grad, read=None):
    before = params.clone(), {k: v.clone() for k, v in rule.state.items()}, rule.updates
    assert not rule.apply_if_finite(params, grad, read_params=read)
    assert torch.equal(params, before[0]) and rule.updates == before[2]
    assert all(torch.equal(rule.state[k], v) for k, v in before[1].items())


def test_four_deltas_of_1e38_under_momentum_are_refused_at_the_overflow():
    rule, params = make_rule("momentum", lr=1e-3)
    delta = torch.full((params.numel(),), 1e38)
    outcomes = []
    for _ in range(4):
        before = params.clone(), rule.state["momentum_buffer"].clone()
        applied = rule.apply_if_finite(params, delta)
        outcomes.append(applied)
        if not applied:
            assert torch.equal(params, before[0]) and torch.equal(rule.state["momentum_buffer"], before[1])
        assert torch.isfinite(params).all() and torch.isfinite(rule.state["momentum_buffer"]).all()
    assert False in outcomes


@pytest.mark.parametrize("name", ["adam", "adamw", "adagrad"])
def test_a_gradient_whose_square_overflows_the_second_moment_is_refused(name):
    rule, params = make_rule(name, lr=1e-3)
    assert rule.apply_if_finite(params, torch.ones(params.numel()))
    refused_untouched(rule, params, torch.full((params.numel(),), 1e38))  # its square is past float32's range


def test_weight_decay_that_overflows_the_gradient_is_refused():
    rule, params = make_rule("sgd-weight-decay", lr=1e-3)
    params.copy_(torch.full_like(params, 3e38))  # written outside the rule: the bound is measured again
    refused_untouched(rule, params, torch.full((params.numel(),), 2e38))


def test_dc_asgd_compensation_that_overflows_is_refused():
    rule, params = make_rule("dc-asgd", lr=1e-3)
    read = params - 1e20  # compensation: g + lambda * g * g * (w - w_read) = 1 + 0.5 * 1e19^2 * 1e20
    refused_untouched(rule, params, torch.full((params.numel(),), 1e19), read)


def test_a_write_from_outside_the_rule_is_noticed():
    rule, params = make_rule("sgd", lr=10.0)
    assert rule.apply_if_finite(params, torch.ones(params.numel()))  # bounds known: |params| about 12
    params.copy_(torch.full_like(params, -3e38))  # as a restored checkpoint does
    refused_untouched(rule, params, torch.full((params.numel(),), 1e37))  # -3e38 - 10 * 1e37 overflows


def test_a_non_finite_gradient_is_refused_before_anything_runs():
    rule, params = make_rule("adam")
    grad = torch.ones(params.numel())
    grad[3] = math.nan
    refused_untouched(rule, params, grad)
    assert abs_max(grad) == math.inf and abs_max(torch.tensor([-5.0, 2.0])) == 5.0


@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 1e6, 1e17, 1e30])
@pytest.mark.parametrize("numel", [1, 7, 4096, 100_003, 300_007])
def test_the_gradient_bound_is_never_below_its_largest_element(scale, numel):
    gen = torch.Generator().manual_seed(numel)
    grad = torch.randn(numel, generator=gen) * scale
    grad[numel // 2] = -3 * scale  # the largest |element|, negative
    exact = abs_max(grad)
    bound = abs_bound(grad)
    assert exact <= bound <= exact * math.sqrt(numel) * 1.01 + 1e-17
    if float((grad.double() ** 2).sum()) > 2 * torch.finfo(torch.float32).max:  # squares overflow: measured exactly
        assert bound == exact


def test_the_gradient_bound_is_infinite_for_a_non_finite_element_and_exact_where_it_cannot_use_squares():
    for bad in (math.nan, math.inf, -math.inf):
        grad = torch.ones(1000)
        grad[999] = bad
        assert abs_bound(grad) == math.inf
    strided = torch.arange(-10.0, 10.0)[::3]
    assert abs_bound(strided) == abs_max(strided) == 10.0
    assert abs_bound(torch.tensor([-5.0, 2.0], dtype=torch.float64)) == 5.0
    assert abs_bound(torch.zeros(0)) == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_plain_sgd_at_a_small_rate_settles_the_guard_with_the_finiteness_check(bad):
    # No finite gradient can take |params| + 0.1 * float32's largest value out of range: the
    # finiteness check's sum is the only pass over the gradient, the bound float32's largest value.
    rule, params = make_rule("sgd", lr=0.1)
    grad = torch.ones(params.numel())
    assert rule.grad_bound(params, grad) == FLOAT32_MAX
    grad[5] = bad
    assert rule.grad_bound(params, grad) == math.inf
    refused_untouched(rule, params, grad)


@pytest.mark.parametrize("name, lr", [("sgd", 0.5), ("momentum", 0.1), ("adam", 0.1), ("dc-asgd", 0.1)])
def test_a_step_some_finite_gradient_could_overflow_reads_the_gradients_bound(name, lr):
    rule, params = make_rule(name, lr=lr)
    grad = torch.randn(params.numel(), generator=torch.Generator().manual_seed(2))
    assert rule.grad_bound(params, grad, read_params=params.clone()) == abs_bound(grad)


def test_largest_finite_gradients_under_plain_sgd_are_refused_when_they_would_overflow():
    # Each step alone is safe until |params| nears the range: then the bound is read, and the step refused whole.
    rule, params = make_rule("sgd", lr=0.2)
    grad = torch.full((params.numel(),), FLOAT32_MAX)
    outcomes = []
    for _ in range(6):
        before = params.clone()
        applied = rule.apply_if_finite(params, grad)
        outcomes.append(applied)
        if not applied:
            assert torch.equal(params, before)
        assert torch.isfinite(params).all()
    assert outcomes[0] and not outcomes[-1]
