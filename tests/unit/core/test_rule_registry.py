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
        name, family, torch_class, keys, decoupled_weight_decay = "nostep", "nostep", None, ("lr",), False

        def initial_state(self, cfg, params):
            return {}

        @classmethod
        def torch_optimizer(cls, cfg, params):
            return torch.optim.SGD(params, lr=cfg.lr)

        @classmethod
        def from_torch(cls, group):
            return {}
    with pytest.raises(TypeError, match="lacks step"):
        rule(NoStep)
    assert "nostep" not in RULES


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
