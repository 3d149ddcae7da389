"""The local-method table: each combination of `local:` flags selects exactly one
method, each method's hooks give the outer rule the shards apply, and a method
lacking a part (or selecting what another selects) is refused."""
import pytest

from psgd.config import load_config
from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods import LOCAL_METHODS, LocalMethod, local_method, method_for
from psgd.core.local_methods.diloco import DiLoCo
from psgd.core.local_methods.registry import check_local_methods


@pytest.mark.parametrize("flags, method", [
    ({}, "LocalSGD"),
    ({"outer_momentum": 0.9, "outer_nesterov": True}, "DiLoCo"),
    ({"outer_momentum": 0.9, "delayed_nesterov": True}, "AsyncDiLoCo"),
    ({"dynamic": True}, "DyLU"),
    ({"outer_momentum": 0.9, "delayed_nesterov": True, "dynamic": True}, "DyLU"),
])
def test_the_flags_select_one_method(flags, method):
    assert type(method_for(LocalConfig(steps=4, **flags), 4)).__name__ == method


def test_dylu_keeps_the_outer_rule_of_the_method_its_other_flags_select():
    cfg = load_config(None, ["local.steps=4", "local.outer_momentum=0.9", "local.delayed_nesterov=true",
                             "local.dynamic=true", "cluster.workers=3", "consistency.mode=asp"])
    dylu, fixed = method_for(cfg.local, 3), method_for(LocalConfig(**{**cfg.local.__dict__, "dynamic": False}), 3)
    assert type(fixed).__name__ == "AsyncDiLoCo"
    assert dylu.outer_rule(cfg.optimizer, True) == fixed.outer_rule(cfg.optimizer, True)
    assert fixed.outer_rule(cfg.optimizer, True).momentum_period == 3


def test_a_method_lacking_its_own_selects_is_refused():
    with pytest.raises(TypeError, match="lacks selects"):
        local_method(type("Copy", (DiLoCo,), {"name": "copy"}))
    assert "Copy" not in LOCAL_METHODS


def test_a_method_lacking_a_name_is_refused():
    class Nameless(LocalMethod):
        @classmethod
        def selects(cls, local):
            return False
    with pytest.raises(TypeError, match="lacks name"):
        local_method(Nameless)


def test_two_methods_selecting_one_setting_fail_the_check():
    class Greedy(LocalMethod):
        name = "greedy"

        @classmethod
        def selects(cls, local):
            return True
    with pytest.raises(TypeError, match="select LocalConfig"):
        check_local_methods({**LOCAL_METHODS, "Greedy": Greedy})
    check_local_methods(LOCAL_METHODS)
