"""Local updates without sockets: the outer rules the shards apply to deltas
(Delayed Nesterov included), the inner optimizer a worker steps, the config's
checks, and a resent delta on a shard."""
import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.core.local_methods.optimizers import inner_torch_optimizer, outer_optimizer, server_optimizer
from psgd.core.rules.updater import ShardUpdater
from psgd.servers.state import PushStatus, ShardState


def cfg(*sets):
    return load_config(None, list(sets))


def test_without_local_updates_the_shards_apply_the_optimizer_section():
    c = cfg("optimizer.name=adam", "optimizer.lr=0.01")
    assert server_optimizer(c) == c.optimizer


def test_the_outer_rule_is_sgd_with_the_local_sections_rate_and_momentum():
    c = cfg("local.steps=8", "local.outer_lr=0.7", "local.outer_momentum=0.9", "local.outer_nesterov=true",
            "optimizer.name=adamw", "optimizer.lr=0.001", "optimizer.weight_decay=0.1",
            "optimizer.staleness_aware=true")
    outer = server_optimizer(c)
    assert (outer.name, outer.lr, outer.momentum, outer.nesterov) == ("sgd", 0.7, 0.9, True)
    assert outer.weight_decay == 0 and outer.momentum_period == 1
    assert outer.staleness_aware  # a server-side option of the section carries over to deltas


@pytest.mark.parametrize("mode,share", [("bsp", 1.0), ("ssp", 0.25), ("asp", 0.25)])
def test_a_delta_applied_alone_takes_its_workers_share_of_the_outer_step(mode, share):
    """The outer rate is for the mean of the W deltas, which bsp applies once; ssp/asp apply
    each alone, at rate / W (GEO-SGD's 1 / trainers), so W of them move as far as the mean."""
    c = cfg("local.steps=4", "local.outer_lr=0.8", f"consistency.mode={mode}", "cluster.workers=4")
    assert outer_optimizer(c).push_share == share
    params = torch.zeros(3)
    ShardUpdater(outer_optimizer(c), params).apply(params, torch.tensor([4.0, 8.0, -4.0]))
    assert torch.equal(params, -0.8 * share * torch.tensor([4.0, 8.0, -4.0]))


def test_w_lone_deltas_in_a_row_equal_bsps_one_step_on_their_mean():
    deltas = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    moved = {}
    for mode in ("bsp", "asp"):
        c = cfg("local.steps=4", "local.outer_lr=0.7", f"consistency.mode={mode}", "cluster.workers=4")
        params = torch.zeros(50)
        rule = ShardUpdater(outer_optimizer(c), params)
        for d in ([deltas.mean(0)] if mode == "bsp" else deltas):
            rule.apply(params, d)
        moved[mode] = params
    torch.testing.assert_close(moved["asp"], moved["bsp"], rtol=0, atol=1e-6)


def test_without_local_updates_and_under_delayed_nesterov_nothing_is_shared():
    assert server_optimizer(cfg("consistency.mode=asp", "cluster.workers=4")).push_share == 1.0
    dn = cfg("local.steps=4", "local.outer_momentum=0.9", "local.delayed_nesterov=true", "cluster.workers=4",
             "consistency.mode=asp")
    assert outer_optimizer(dn).push_share == 1.0  # it applies each delta at lr / N by itself


def test_delayed_nesterov_moves_the_momentum_once_per_workers_deltas():
    c = cfg("local.steps=4", "local.outer_momentum=0.9", "local.delayed_nesterov=true", "cluster.workers=3",
            "consistency.mode=asp")
    assert outer_optimizer(c).momentum_period == 3


@pytest.mark.parametrize("periods", [1, 3])
def test_delayed_nesterov_over_a_period_equals_one_nesterov_step_on_the_mean(periods):
    n, lr, beta = 4, 0.7, 0.9
    c = cfg("local.steps=2", "local.outer_lr=0.7", "local.outer_momentum=0.9", "local.delayed_nesterov=true",
            f"cluster.workers={n}", "consistency.mode=asp")
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(50, generator=gen)
    params = start.clone()
    rule = ShardUpdater(outer_optimizer(c), params)
    reference = torch.nn.Parameter(start.clone())
    nesterov = torch.optim.SGD([reference], lr=lr, momentum=beta, nesterov=True)
    for _ in range(periods):
        deltas = [torch.randn(50, generator=gen) for _ in range(n)]
        for d in deltas:
            rule.apply(params, d)
        reference.grad = torch.stack(deltas).mean(0)
        nesterov.step()
        torch.testing.assert_close(params, reference.detach(), rtol=0, atol=1e-5)


def test_between_momentum_moves_each_delta_is_applied_at_the_rate_over_n():
    c = cfg("local.steps=2", "local.outer_lr=0.5", "local.outer_momentum=0.9", "local.delayed_nesterov=true",
            "cluster.workers=4", "consistency.mode=ssp")
    params = torch.zeros(3)
    rule = ShardUpdater(outer_optimizer(c), params)
    rule.apply(params, torch.tensor([4.0, 8.0, -4.0]))
    assert torch.equal(params, torch.tensor([-0.5, -1.0, 0.5]))  # 0.5 / 4 times the delta, no momentum yet
    assert torch.equal(rule.state["momentum_buffer"], torch.zeros(3))


@pytest.mark.parametrize("name,extra", [("sgd", ["optimizer.momentum=0.9", "optimizer.nesterov=true"]),
                                        ("adam", []), ("adamw", ["optimizer.weight_decay=0.01"]),
                                        ("adagrad", [])])
def test_the_inner_optimizer_follows_the_sections_formulas(name, extra):
    # The servers' rules follow torch.optim exactly: the worker's inner optimizer must match them.
    c = cfg(f"optimizer.name={name}", "optimizer.lr=0.05", *extra)
    gen = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.randn(20, generator=gen))
    flat = p.detach().clone()
    inner = inner_torch_optimizer(c.optimizer, [p])
    rule = ShardUpdater(c.optimizer, flat)
    for _ in range(5):
        grad = torch.randn(20, generator=gen)
        p.grad = grad.clone()
        inner.step()
        rule.apply(flat, grad)
    torch.testing.assert_close(p.detach(), flat, rtol=0, atol=1e-6)


@pytest.mark.parametrize("sets,key", [
    (["local.steps=4", "consistency.mode=allreduce"], "local.steps"),
    (["local.steps=4", "local.outer_momentum=0.9", "local.delayed_nesterov=true", "consistency.mode=bsp"],
     "local.delayed_nesterov"),
    (["local.steps=4", "optimizer.dc_asgd.lambda=0.1"], "optimizer.dc_asgd"),
    (["local.steps=4", "optimizer.lr_scaling=linear"], "optimizer.lr_scaling"),
    (["local.steps=4", "optimizer.schedule.name=cosine"], "optimizer.schedule"),
    (["local.steps=-1"], "local.steps"),
    (["local.steps=2", "local.outer_nesterov=true"], "local.outer_nesterov"),
    (["local.steps=2", "local.outer_lr=0"], "local.outer_lr"),
])
def test_impossible_local_settings_fail_naming_the_key(sets, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        cfg(*sets)


def test_a_resent_delta_is_applied_once():
    c = cfg("local.steps=4", "local.outer_lr=0.5", "consistency.mode=asp", "cluster.workers=2")
    state = ShardState(c, 0, torch.zeros(3))
    state.register(0, now=0.0)
    delta = torch.tensor([1.0, -2.0, 4.0])
    assert state.push(0, 0, 0, 0, delta).status is PushStatus.APPLIED
    assert state.push(0, 0, 0, 0, delta).status is PushStatus.DUPLICATE
    assert torch.equal(state.params, -0.25 * delta) and state.version == 1  # its share 1/2 of the rate 0.5


def test_a_non_finite_delta_is_refused_with_the_parameters_untouched():
    c = cfg("local.steps=4", "consistency.mode=asp", "cluster.workers=1")
    state = ShardState(c, 0, torch.ones(3))
    state.register(0, now=0.0)
    assert state.push(0, 0, 0, 0, torch.tensor([1.0, float("nan"), 0.0])).status is PushStatus.NON_FINITE
    assert torch.equal(state.params, torch.ones(3)) and state.version == 0


def test_dylu_shortens_a_slow_workers_round_in_proportion_to_its_speed():
    from psgd.config.local_updates import LocalConfig
    from tests.support.local_methods import method_of
    dylu = method_of(LocalConfig(steps=8, dynamic=True), 4)
    assert dylu.paced and dylu.name == "DyLU"
    assert dylu.round_steps(own_step_s=0.04, fastest_step_s=0.01) == 2   # 4x slower: a quarter of the steps
    assert dylu.round_steps(own_step_s=0.03, fastest_step_s=0.01) == 3   # 8 / 3 rounds to 3
    assert dylu.round_steps(own_step_s=0.01, fastest_step_s=0.01) == 8   # the fastest worker keeps the nominal
    assert dylu.round_steps(own_step_s=1.0, fastest_step_s=0.001) == 1   # never fewer than one step
    for own, fastest in ((0.0, 0.01), (0.01, 0.0), (float("inf"), 0.01), (0.01, float("nan"))):
        assert dylu.round_steps(own, fastest) == 8  # not measured yet: the nominal round


def test_a_shard_reports_the_fastest_workers_time_per_step_and_forgets_departed_ones():
    from psgd.core.local_methods.pace import SPEED_SMOOTHING, StepSpeeds
    speeds = StepSpeeds()
    assert speeds.fastest() == 0.0
    speeds.observe(0, step_s=0.8, steps=8)   # 0.1 s a step
    speeds.observe(1, step_s=4.0, steps=2)   # 2 s a step
    speeds.observe(2, step_s=0.0, steps=8)   # not measured: ignored
    assert speeds.fastest() == pytest.approx(0.1)
    speeds.observe(0, step_s=8.0, steps=8)   # one slow round (1 s a step) moves rank 0 by a fraction only
    assert speeds.fastest() == pytest.approx(0.1 + SPEED_SMOOTHING * (1.0 - 0.1))
    speeds.forget(0)
    assert speeds.fastest() == pytest.approx(2.0)
