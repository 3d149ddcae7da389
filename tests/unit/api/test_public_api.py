"""`import psgd`: the public names, loaded lazily."""
import pytest
import yaml

import psgd


def test_every_public_name_resolves():
    for name in psgd.__all__:
        assert getattr(psgd, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        psgd.nope  # noqa: B018


def test_launch_is_the_function_after_the_orchestration_package_was_imported():
    import psgd.orchestrate.supervisor  # noqa: F401  a submodule import binds only psgd.orchestrate
    from psgd.orchestrate.api import launch
    assert psgd.launch is launch


def test_load_config_takes_a_path_a_mapping_or_a_config_with_overrides(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"optimizer": {"name": "adam", "lr": 0.01}}))
    from_path = psgd.load_config(path, overrides=["cluster.workers=3"])
    from_dict = psgd.load_config({"optimizer": {"name": "adam", "lr": 0.01}}, overrides=["cluster.workers=3"])
    assert from_path.optimizer == from_dict.optimizer and from_path.cluster.workers == from_dict.cluster.workers == 3
    again = psgd.load_config(from_dict, overrides=["optimizer.lr=0.5"])
    assert again.optimizer.lr == 0.5 and again.cluster.workers == 3
    with pytest.raises(psgd.ConfigError, match="optimizer.lrr: unknown key"):
        psgd.load_config({"optimizer": {"lrr": 1}})
    with pytest.raises(TypeError, match="a YAML path or a mapping"):
        psgd.load_config(42)


def test_psgd_load_config_is_the_config_packages_function_with_its_older_calls():
    from psgd.config import Config, load_config
    assert psgd.load_config is load_config
    assert load_config() == load_config(None, []) == Config()
    sections = {"cluster": {"workers": 2}}
    assert load_config(None, ["optimizer.lr=0.25"], data=sections) == load_config(sections, ["optimizer.lr=0.25"])
    cfg = load_config(sections)
    assert load_config(cfg) is cfg  # a Config without overrides is returned as it is
    with pytest.raises(TypeError, match="not both"):
        load_config(sections, data=sections)
