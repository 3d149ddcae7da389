"""CurveZMQ: with `security.curve` on, only clients holding an authorised key
can register, pull or push; an authorised client trains normally."""
import threading

import pytest
import torch

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.servers.shard import ShardServer
from psgd.tasks import build_model, load_task
from psgd.wire.keys.curve import client_curve, server_curve
from psgd.wire.transport import generate_keys
from psgd.workers.client import PSClient, RequestFailed


@pytest.fixture
def curve_shard(tmp_path):
    generate_keys(tmp_path / "keys", clients=1)
    generate_keys(tmp_path / "outsider", clients=1)  # a valid key pair the shard never authorised
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic", "cluster.servers=1",
                             "cluster.workers=2", "consistency.mode=asp", "optimizer.lr=0.5",
                             "security.curve=true", f"security.keys_dir={tmp_path / 'keys'}"])
    layout = layout_for_module(build_model(cfg, load_task(cfg)), 1)
    start = torch.linspace(-1, 1, layout.shard_sizes[0])
    server = ShardServer(cfg, 0, "127.0.0.1:0", start, layout.fingerprint, curve=server_curve(cfg))
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, args=(stop,), daemon=True)
    thread.start()
    yield cfg, layout, server, start, tmp_path
    stop.set()
    thread.join(timeout=5)


def client(server, layout, rank, curve):
    return PSClient([server.address], layout, rank=rank, heartbeat_s=None, request_timeout_s=0.5,
                    max_retries=1, curve=curve)


@pytest.mark.timeout(60)
def test_only_authorised_keys_can_pull_or_push(curve_shard):
    cfg, layout, server, start, tmp = curve_shard
    outsider_cfg = load_config(None, ["security.curve=true", f"security.keys_dir={tmp / 'keys'}",
                                      f"security.client_key={tmp / 'outsider' / 'client.key_secret'}"])
    grad = [torch.ones(layout.shard_sizes[0])]
    for curve in (client_curve(outsider_cfg), None):  # a foreign key pair; no encryption at all
        intruder = client(server, layout, 1, curve)
        try:
            with pytest.raises(RequestFailed):
                intruder.register()
            with pytest.raises(RequestFailed):
                intruder.push(grad)
            with pytest.raises(RequestFailed):
                intruder.pull()
        finally:
            intruder.close()
    state = server.state
    assert state.version == 0 and not state.registered and state.counters["pulls"] == 0
    assert torch.equal(state.params, start)

    member = client(server, layout, 0, client_curve(cfg))
    try:
        before = member.register()[0].clone()
        for _ in range(20):
            after = member.push_pull(grad)[0]
        torch.testing.assert_close(after, before - 20 * 0.5 * 1.0, rtol=0, atol=1e-5)
        assert state.version == 20 and state.registered == {0}
    finally:
        member.close()
