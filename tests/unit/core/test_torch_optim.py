"""torch.optim optimizers read as psgd server rules: what maps, what is refused."""
import pytest
import torch
from torch import nn

from psgd.config import OptimizerConfig
from psgd.core.torch_optim import UnsupportedOptimizer, rule_differences, rule_from_torch

BASE = OptimizerConfig(staleness_aware=True, max_staleness_drop=4)


def model():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


@pytest.mark.parametrize("make, expected", [
    (lambda p: torch.optim.SGD(p, lr=0.3, momentum=0.8, nesterov=True, weight_decay=1e-3),
     dict(name="sgd", lr=0.3, momentum=0.8, nesterov=True, weight_decay=1e-3)),
    (lambda p: torch.optim.Adam(p, lr=2e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-4),
     dict(name="adam", lr=2e-3, betas=[0.8, 0.99], eps=1e-6, weight_decay=1e-4)),
    (lambda p: torch.optim.AdamW(p, lr=1e-3),
     dict(name="adamw", lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)),
    (lambda p: torch.optim.Adagrad(p, lr=0.05, eps=1e-10),
     dict(name="adagrad", lr=0.05, eps=1e-10, weight_decay=0.0)),
])
def test_supported_optimizers_map_every_hyperparameter_and_keep_psgd_settings(make, expected):
    m = model()
    rule = rule_from_torch(make(m.parameters()), m.parameters(), BASE)
    for key, value in expected.items():
        assert getattr(rule, key) == pytest.approx(value), key
    assert rule.staleness_aware and rule.max_staleness_drop == 4  # psgd-only settings survive


def test_tensor_lr_is_read_as_a_number():
    m = model()
    rule = rule_from_torch(torch.optim.Adam(m.parameters(), lr=torch.tensor(0.01)), m.parameters(), BASE)
    assert rule.lr == pytest.approx(0.01) and isinstance(rule.lr, float)


@pytest.mark.parametrize("make, words", [
    (lambda p: torch.optim.Adam(p, amsgrad=True), "amsgrad"),
    (lambda p: torch.optim.SGD(p, lr=0.1, maximize=True), "maximize"),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1), "dampening"),
    (lambda p: torch.optim.Adagrad(p, lr_decay=0.01), "lr_decay"),
    (lambda p: torch.optim.Adagrad(p, initial_accumulator_value=0.1), "initial_accumulator_value"),
    (lambda p: torch.optim.RMSprop(p), "RMSprop"),
])
def test_settings_without_an_exact_server_rule_are_refused_by_name(make, words):
    m = model()
    with pytest.raises(UnsupportedOptimizer, match=words):
        rule_from_torch(make(m.parameters()), m.parameters(), BASE)


def test_groups_with_different_lrs_are_refused_but_equal_groups_are_fine():
    m = model()
    first, second = list(m[0].parameters()), list(m[2].parameters())
    differing = torch.optim.SGD([{"params": first, "lr": 0.1}, {"params": second, "lr": 0.01}], lr=0.1)
    with pytest.raises(UnsupportedOptimizer, match="group 1 has lr=0.01"):
        rule_from_torch(differing, m.parameters(), BASE)
    same = torch.optim.SGD([{"params": first}, {"params": second}], lr=0.1)
    assert rule_from_torch(same, m.parameters(), BASE).lr == 0.1


def test_optimizer_must_cover_exactly_the_models_trainable_parameters():
    m = model()
    with pytest.raises(UnsupportedOptimizer, match="not in the optimizer"):
        rule_from_torch(torch.optim.SGD(m[0].parameters(), lr=0.1), m.parameters(), BASE)
    with pytest.raises(UnsupportedOptimizer, match="not trainable parameters"):
        rule_from_torch(torch.optim.SGD(model().parameters(), lr=0.1), m.parameters(), BASE)
    m[0].weight.requires_grad_(False)  # frozen parameters need not be in the optimizer
    trainable = [p for p in m.parameters() if p.requires_grad]
    assert rule_from_torch(torch.optim.SGD(trainable, lr=0.1), m.parameters(), BASE).name == "sgd"


def test_rule_differences_name_only_the_settings_the_rule_uses():
    adam = OptimizerConfig(name="adam", lr=1e-3)
    assert rule_differences(adam, OptimizerConfig(name="adam", lr=1e-3, momentum=0.5)) == []  # adam ignores momentum
    assert rule_differences(adam, OptimizerConfig(name="adam", lr=1e-2)) == ["optimizer.lr: 0.001 here, 0.01 in the config"]
    assert rule_differences(adam, OptimizerConfig(name="sgd")) == ["optimizer.name: adam here, sgd in the config"]
    # 'momentum' is sgd with momentum 0.9 by default: the same arithmetic
    assert rule_differences(OptimizerConfig(name="sgd", momentum=0.9), OptimizerConfig(name="momentum")) == []
