"""The update-rule table: every optimizer.name has one rule with every part, a
rule lacking a part is refused when it is defined, and the names agree with the config."""
import typing

import pytest
import torch

from psgd.config import OptimizerConfig
from psgd.core.rules import RULES, Rule, rule
from psgd.core.rules.registry import check_rules
from psgd.core.rules.sgd import SGD


def test_every_config_name_has_its_rule():
    names = typing.get_args(typing.get_type_hints(OptimizerConfig)["name"])
    assert sorted(RULES) == sorted(names)
    assert all(RULES[n].name == n for n in names)


def test_each_torch_class_is_followed_by_one_rule():
    classes = [r.torch_class for r in RULES.values() if r.torch_class is not None]
    assert len(classes) == len(set(classes))


@pytest.mark.parametrize("missing", ["name", "family", "keys"])
def test_a_rule_lacking_an_attribute_is_refused(missing):
    cls = type("Lion", (SGD,), {"name": "lion", missing: None})
    with pytest.raises(TypeError, match=f"lacks {missing}"):
        rule(cls)
    assert "lion" not in RULES


def test_a_rule_lacking_its_step_is_refused():
    class NoStep(Rule):
        name, family, torch_class, keys, decoupled_weight_decay = "nostep", "nostep", torch.optim.SGD, ("lr",), False

        def initial_state(self, cfg, params):
            return {}

        def magnitudes(self, bound, grad, lr, update):
            return {"": bound[""] + lr * grad}

        @classmethod
        def from_torch(cls, group):
            return {}
    with pytest.raises(TypeError, match="lacks step"):
        rule(NoStep)
    assert "nostep" not in RULES


def test_a_rule_that_cannot_bound_its_step_is_refused():
    class NoBound(SGD):
        name = "nobound"
        magnitudes = Rule.magnitudes  # the abstract one again
    with pytest.raises(TypeError, match="lacks magnitudes"):
        rule(NoBound)
    assert "nobound" not in RULES


def test_a_rule_without_a_torch_class_needs_a_family_that_has_one():
    with pytest.raises(TypeError, match="lacks torch_class .*family 'lion'"):
        rule(type("Lion", (SGD,), {"name": "lion", "family": "lion", "torch_class": None}))
    assert "lion" not in RULES
    inner = RULES["momentum"].torch_optimizer(OptimizerConfig(name="momentum", lr=0.1), [torch.nn.Parameter(torch.ones(2))])
    assert type(inner) is torch.optim.SGD and inner.param_groups[0]["momentum"] == 0.9  # its family's class


def test_each_rules_torch_twin_has_the_rules_settings():
    for name, cls in RULES.items():
        cfg = OptimizerConfig(name=name, lr=0.05, weight_decay=0.01)
        group = cls.torch_optimizer(cfg, [torch.nn.Parameter(torch.ones(2))]).param_groups[0]
        assert {k: list(group[k]) if k == "betas" else group[k] for k in cls.keys} == cls.settings(cfg), name


def test_a_rule_naming_an_unknown_setting_or_reusing_a_name_is_refused():
    with pytest.raises(TypeError, match="not optimizer settings"):
        rule(type("Odd", (SGD,), {"name": "odd", "keys": ("lr", "rho")}))
    with pytest.raises(TypeError, match="reuses the name 'adam'"):
        rule(type("Adam2", (SGD,), {"name": "adam"}))
    assert "odd" not in RULES and RULES["adam"].__name__ == "Adam"


def test_config_names_and_rules_must_agree():
    names = tuple(RULES)
    check_rules(RULES, names)
    with pytest.raises(TypeError, match="with no update rule: lion"):
        check_rules(RULES, names + ("lion",))
    with pytest.raises(TypeError, match="cannot select .*: Adagrad"):
        check_rules(RULES, tuple(n for n in names if n != "adagrad"))
