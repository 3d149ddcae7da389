"""The local-method table: `local.method` names one method (or the older flags do, as
before the key), each method's hooks give the outer rule the shards apply, a word with no
method or a method with no word fails the import check, and a method lacking a part is refused."""
import typing

import pytest

from psgd.config import ConfigError, load_config
from psgd.config.local_updates import LocalMethodWord
from psgd.core.local_methods import LOCAL_METHODS, LocalMethod, local_method, method_for
from psgd.core.local_methods.diloco import DiLoCo
from psgd.core.local_methods.registry import check_local_methods

ASP = ["consistency.mode=asp"]


@pytest.mark.parametrize("flags, method", [
    ([], "LocalSGD"),
    (["local.outer_momentum=0.9", "local.outer_nesterov=true"], "DiLoCo"),
    (["local.outer_momentum=0.9", "local.delayed_nesterov=true", *ASP], "AsyncDiLoCo"),
    (["local.dynamic=true"], "DyLU"),
    (["local.outer_momentum=0.9", "local.delayed_nesterov=true", "local.dynamic=true", *ASP], "DyLU"),
    (["local.eager=true"], "Eager"),
    (["local.fragments=1"], "StreamingDiLoCo"),
])
def test_the_older_flags_still_select_the_method_they_did(flags, method):
    cfg = load_config(None, ["local.steps=4", *flags])
    assert type(method_for(cfg)).__name__ == method
    assert LOCAL_METHODS[cfg.local.method].__name__ == method  # and name it in local.method


@pytest.mark.parametrize("word", typing.get_args(LocalMethodWord))
def test_local_method_selects_the_method_with_that_word(word):
    needs = {"async_diloco": ["local.outer_momentum=0.9", *ASP], "streaming_diloco": ["local.fragments=1"],
             "sparseloco": ["wire.compression=topk_int2"]}
    cfg = load_config(None, ["local.steps=4", f"local.method={word}", *needs.get(word, [])])
    assert method_for(cfg).word == word
    assert load_config(cfg).local == cfg.local  # the resolved config loads back as itself


@pytest.mark.parametrize("sets, key", [
    (["local.method=bogus"], "local.method"),
    (["local.method=diloco", "local.dynamic=true"], "local.dynamic"),
    (["local.method=dylu", "local.fragments=1"], "local.fragments"),
    (["local.method=streaming_diloco"], "local.fragments"),
    (["local.dynamic=true", "local.eager=true"], "local.eager"),
    (["local.method=diloco", "local.outer_momentum=0.9", "local.delayed_nesterov=true", *ASP],
     "local.delayed_nesterov"),
])
def test_a_word_or_flag_that_contradicts_local_method_is_refused_naming_the_key(sets, key):
    with pytest.raises(ConfigError, match=key) as err:
        load_config(None, ["local.steps=4", *sets])
    assert "\n" not in str(err.value)


def test_a_named_method_waits_for_local_updates():
    cfg = load_config(None, ["local.method=diloco"])  # a config names its method; --modes asp runs without
    assert not cfg.local.enabled and load_config(None, ["local.method=diloco", "local.steps=4"]).local.method == "diloco"


def test_dylu_keeps_the_outer_rule_of_the_method_its_outer_settings_give():
    common = ["local.steps=4", "local.outer_momentum=0.9", "cluster.workers=3", *ASP]
    dylu = method_for(load_config(None, [*common, "local.method=dylu", "local.delayed_nesterov=true"]))
    fixed = method_for(load_config(None, [*common, "local.method=async_diloco"]))
    assert dylu.outer_rule(load_config(None).optimizer, True) == fixed.outer_rule(load_config(None).optimizer, True)
    assert fixed.outer_rule(load_config(None).optimizer, True).momentum_period == 3


def test_a_method_lacking_its_own_word_is_refused():
    with pytest.raises(TypeError, match="lacks word"):
        local_method(type("Copy", (DiLoCo,), {"name": "copy"}))
    assert all(m.__name__ != "Copy" for m in LOCAL_METHODS.values())


def test_a_method_lacking_a_name_is_refused():
    class Nameless(LocalMethod):
        word = "nameless"
    with pytest.raises(TypeError, match="lacks name"):
        local_method(Nameless)


def test_a_word_without_a_method_and_a_method_without_a_word_fail_the_check():
    words = typing.get_args(LocalMethodWord)
    with pytest.raises(TypeError, match="no local method: extra"):
        check_local_methods(LOCAL_METHODS, (*words, "extra"))

    class Unlisted(LocalMethod):
        word, name = "unlisted", "unlisted"
    with pytest.raises(TypeError, match="Unlisted"):
        check_local_methods({**LOCAL_METHODS, "unlisted": Unlisted}, words)
    check_local_methods(LOCAL_METHODS, words)
