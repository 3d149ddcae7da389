"""Config loading: defaults, overrides parsed as YAML, unknown keys and bad values named by path."""
import pytest
import yaml

from psgd.config import ConfigError, config_to_dict, dump_config, load_config


def test_defaults_and_yaml_overrides():
    cfg = load_config(None, ["cluster.workers=4", "workers.slowdown={3: 4.0}", "optimizer.dc_asgd={lambda: 0.1}",
                             "cluster.servers=['10.0.0.1:7000', '10.0.0.2:7000']"])
    assert cfg.workers.slowdown == {3: 4.0}
    assert cfg.optimizer.dc_asgd.lambda_ == 0.1
    assert cfg.cluster.num_servers == 2
    assert cfg.run.threads == 1


def test_dump_round_trips(tmp_path):
    cfg = load_config(None, ["consistency.mode=ssp", "consistency.staleness=3", "workers.slowdown={1: 2.5}"])
    path = tmp_path / "c.yaml"
    path.write_text(dump_config(cfg))
    again = load_config(path)
    assert config_to_dict(again) == config_to_dict(cfg)


@pytest.mark.parametrize("override, key, words", [
    ("cluster.workers=-3", "cluster.workers", ">= 1"),
    ("cluster.wrokers=3", "cluster.wrokers", "unknown key"),
    ("optimizer.lr=fast", "optimizer.lr", "number"),
    ("consistency.mode=eventual", "consistency.mode", "one of"),
    ("workers.slowdown={9: 2.0}", "workers.slowdown[9]", "no such worker"),
    ("workers.slowdown={1: 0.5}", "workers.slowdown[1]", ">= 1"),
    ("cluster.servers=['nohost']", "cluster.servers[0]", "host:port"),
    ("optimizer.dc_asgd={lamda: 1}", "optimizer.dc_asgd.lamda", "unknown key"),
    ("train.target_accuracy=1.5", "train.target_accuracy", "(0, 1]"),
    ("optimizer.lr=.nan", "optimizer.lr", "finite"),
    ("eval=3", "eval", "mapping"),
])
def test_bad_values_name_the_key(override, key, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert info.value.key == key
    assert words in str(info.value)


def test_unknown_section_in_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"workers": 2}, "trainer": {"steps": 3}}))
    with pytest.raises(ConfigError, match="trainer: unknown key"):
        load_config(path)


def test_malformed_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config(None, ["novalue"])
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_base_dir_is_the_config_directory(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("run: {name: x}\n")
    assert load_config(path).base_dir == str(tmp_path.resolve())


@pytest.mark.parametrize("key,limit", [("wire.max_message_mb", 2047), ("cluster.workers", 1_000_000),
                                       ("run.threads", 1024), ("workers.loader.num_workers", 256),
                                       ("cluster.servers", 4096), ("train.steps_per_worker", 2**31 - 1),
                                       ("checkpoint.every_updates", 2**31 - 1)])
def test_integer_keys_have_an_upper_bound_the_code_can_honour(key, limit):
    from psgd.config import ConfigError, load_config
    load_config(None, [f"{key}={limit}"] + (["cluster.servers=2"] if key != "cluster.servers" else []))
    with pytest.raises(ConfigError, match=f"{key.replace('.', chr(92) + '.')}: must be <= {limit}"):
        load_config(None, [f"{key}={2**63 - 1}"])
