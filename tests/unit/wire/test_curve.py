"""CurveZMQ: with `security.curve` on, only clients holding an authorised key
can register, pull or push; an authorised client trains normally."""
import threading
import pytest
import torch
from psgd.config import load_config
from psgd.wire.curve import client_curve, server_curve
from psgd.core.sharding import layout_for_module
from psgd.tasks import build_model, load_task
from psgd.wire.transport import TransportError, generate_keys
from psgd.servers.shard import ShardServer
from psgd.workers.client import PSClient


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


def test_missing_keys_are_a_clear_error(tmp_path):
    cfg = load_config(None, ["security.curve=true", f"security.keys_dir={tmp_path / 'nowhere'}"])
    with pytest.raises(TransportError, match="psgd keys generate"):
        server_curve(cfg)
    with pytest.raises(TransportError, match="key file not found"):
        client_curve(cfg)
