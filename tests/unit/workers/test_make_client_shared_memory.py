"""The worker-side client follows `wire.shared_memory` from the config."""
import pytest

from psgd.config import ConfigError, load_config
from psgd.config.operations import SHARED_MEMORY_MIN_BYTES
from psgd.core.sharding import make_layout
from psgd.wire.shm import segment as shm
from psgd.workers.client_factory import ClientSettings, make_client


@pytest.mark.parametrize("setting, enabled", [("off", False), ("auto", True)])
def test_make_client_follows_wire_shared_memory(setting, enabled):
    cfg = load_config(None, ["cluster.servers=[127.0.0.1:1]", "cluster.workers=1", f"wire.shared_memory={setting}"])
    client = make_client(cfg, make_layout([("w", (10,))], 1), rank=0, role="worker")
    try:
        assert client._shm.enabled is (enabled and shm.available())
        if not enabled:
            assert client._shm.offer(0) == {}
    finally:
        client.close()


def test_a_bad_shared_memory_setting_names_the_key():
    with pytest.raises(ConfigError, match="wire.shared_memory"):
        load_config(None, ["wire.shared_memory=always"])


@pytest.mark.parametrize("text, want", [("off", "off"), ("'off'", "off"), ("false", "off"), ("auto", "auto"),
                                        ("true", "auto")])
def test_yaml_spellings_of_shared_memory(text, want):
    assert load_config(None, [f"wire.shared_memory={text}"]).wire.shared_memory == want


def test_client_settings_read_the_config_once_and_name_a_missing_address_list():
    cfg = load_config(None, ["cluster.servers=[127.0.0.1:1, 127.0.0.1:2]", "cluster.workers=1",
                             "wire.compression=fp16", "wire.max_message_mb=3", "cluster.max_retries=7"])
    settings = ClientSettings.from_config(cfg)
    assert settings.addresses == ("127.0.0.1:1", "127.0.0.1:2")
    assert (settings.wire.compression, settings.max_message_bytes, settings.max_retries) == ("fp16", 3 * 2**20, 7)
    assert settings.curve is None  # security.curve is off by default
    with pytest.raises(ConfigError, match="cluster.servers: this role needs the list of server host:port"):
        ClientSettings.from_config(load_config(None, ["cluster.servers=2"]))


@pytest.mark.parametrize("threshold, wanted", [(None, [False, True]), ("0", [True, True]),
                                               ("4000000", [False, False])])
def test_the_size_threshold_comes_from_the_config(threshold, wanted):
    extra = [f"wire.shared_memory_min_bytes={threshold}"] if threshold is not None else []
    cfg = load_config(None, ["cluster.servers=[127.0.0.1:1]", "cluster.workers=1", *extra])
    got = []
    for numel in (SHARED_MEMORY_MIN_BYTES // 4 - 1, SHARED_MEMORY_MIN_BYTES // 4):  # just below and at the default
        client = make_client(cfg, make_layout([("w", (numel,))], 1), rank=0, role="worker")
        got += client._shm.wanted
        client.close()
    assert got == [w and shm.available() for w in wanted]


@pytest.mark.parametrize("value", ["-1", "2147483648", "1.5"])
def test_a_bad_size_threshold_names_the_key(value):
    with pytest.raises(ConfigError, match="wire.shared_memory_min_bytes"):
        load_config(None, [f"wire.shared_memory_min_bytes={value}"])
