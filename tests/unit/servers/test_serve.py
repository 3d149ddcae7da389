"""psgd.serve: a blocking shard in the calling thread, reached by a real client."""
import threading

import pytest
import torch

import psgd
from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.tasks import build_model, task_shape


def test_serve_answers_a_client_with_the_seeded_model_and_stops_on_its_event():
    ports = free_ports("127.0.0.1", 2)
    cfg = load_config(None, ["cluster.servers=" + str([f"127.0.0.1:{p}" for p in ports]), "cluster.workers=1",
                             "task.model=linear", "task.dataset=synthetic", "checkpoint.enabled=false"])
    stop = threading.Event()
    threads = [threading.Thread(target=psgd.serve, args=(cfg, i), kwargs={"stop": stop}, daemon=True)
               for i in range(2)]
    for t in threads:
        t.start()
    model = build_model(cfg, task_shape(cfg))
    layout = layout_for_module(model, 2)
    client = psgd.PSClient(cfg.cluster.servers, layout, rank=0, heartbeat_s=None)
    try:
        params = client.register()
        expected = layout.flatten([p.detach() for p in model.parameters()])
        for got, want in zip(params, expected):
            assert torch.equal(got, want)
    finally:
        client.close()
        stop.set()
    for t in threads:
        t.join(timeout=10)
        assert not t.is_alive()


def test_serve_refuses_a_shard_the_config_does_not_have():
    cfg = load_config(None, ["cluster.servers=[\"127.0.0.1:1\"]"])
    with pytest.raises(psgd.ConfigError, match="no shard 3 \\(there are 1\\)"):
        psgd.serve(cfg, shard=3)
    with pytest.raises(psgd.ConfigError, match="list of host:port"):
        psgd.serve(load_config(None), shard=0)
