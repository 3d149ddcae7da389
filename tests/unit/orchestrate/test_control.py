"""psgd ctl's argument and run-directory handling (no sockets)."""
import json

import pytest

from psgd.orchestrate.control import ControlFailed, parse_assignments, server_addresses, set_live


def test_parse_assignments():
    assert parse_assignments(["consistency.staleness=4", "optimizer.lr = 0.01"]) == {
        "consistency.staleness": "4", "optimizer.lr": "0.01"}
    for bad, why in ((["staleness"], "key=value"), (["a=1", "a=2"], "twice"), ([], "nothing"), (["=3"], "key=value")):
        with pytest.raises(ControlFailed, match=why):
            parse_assignments(bad)


def test_server_addresses_in_shard_order(tmp_path):
    with pytest.raises(ControlFailed, match="still live"):
        server_addresses(tmp_path)
    (tmp_path / "processes.json").write_text(json.dumps([
        {"role": "worker", "index": 0, "pid": 1},
        {"role": "server", "index": 1, "pid": 2, "address": "127.0.0.1:7001"},
        {"role": "server", "index": 0, "pid": 3, "address": "127.0.0.1:7000"}]))
    assert server_addresses(tmp_path) == ["127.0.0.1:7000", "127.0.0.1:7001"]
    (tmp_path / "processes.json").write_text(json.dumps([{"role": "worker", "index": 0, "pid": 1}]))
    with pytest.raises(ControlFailed, match="no server"):
        server_addresses(tmp_path)


def test_set_live_needs_the_token_and_a_valid_change(tmp_path):
    (tmp_path / "config.yaml").write_text("consistency: {mode: ssp, staleness: 1}\n")
    (tmp_path / "processes.json").write_text(json.dumps([
        {"role": "server", "index": 0, "pid": 2, "address": "127.0.0.1:9"}]))
    with pytest.raises(ControlFailed, match="no run token"):
        set_live(tmp_path, {"consistency.staleness": "3"})
    (tmp_path / "run.token").write_text("abc")
    # refused before any shard is contacted (port 9 would never answer)
    with pytest.raises(ControlFailed, match="consistency.mode"):
        set_live(tmp_path, {"consistency.mode": "bsp"}, timeout_s=0.5)
