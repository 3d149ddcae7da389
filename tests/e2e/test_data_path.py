"""The shard's zero-copy reply path: parameters handed to an in-flight send are
never changed underneath it (copy-on-write), replies are never torn, and the
one-pass non-finite check is exact."""
import threading

import pytest
import torch

from psgd.config import load_config
from psgd.workers.client import PSClient


@pytest.mark.timeout(60)
def test_concurrent_clients_never_receive_torn_parameters(shards):
    # lr 1, every gradient all ones: after v updates every parameter is exactly -v,
    # so any reply mixing two versions shows up as a non-constant tensor.
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic", "cluster.servers=1",
                             "cluster.workers=4", "consistency.mode=asp", "optimizer.lr=1.0"])
    model = torch.nn.Linear(1000, 1000)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    cluster = shards(cfg, model)
    n = cluster.layout.shard_sizes[0]
    bad, versions = [], []

    def run(rank):
        client = PSClient(cluster.addresses, cluster.layout, rank=rank, heartbeat_s=None)
        client.register()
        grads = [torch.ones(n)]
        for _ in range(25):
            out = client.push_pull(grads)[0]
            v = client.versions[0]
            versions.append(v)
            if not (out.min() == out.max() == -v):
                bad.append((rank, v, float(out.min()), float(out.max())))
        client.close()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
    assert max(versions) == 100


@pytest.mark.timeout(60)
@pytest.mark.parametrize("encoding", ["none", "bf16"])
def test_a_reused_gradient_buffer_sends_its_current_contents_every_push(shards, encoding):
    # Workers overwrite one gradient buffer per step and the client reuses the
    # ZeroMQ message built around it; each push must still carry what the buffer
    # holds at that push. lr 1 and small integers keep every sum exact in bf16.
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic", "cluster.servers=1",
                             "cluster.workers=1", "consistency.mode=asp", "optimizer.lr=1.0"])
    model = torch.nn.Linear(400, 100)  # 40,100 elements: zero-copy even as bf16
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    cluster = shards(cfg, model)
    n = cluster.layout.shard_sizes[0]
    # The TCP path (shared memory off): the reused ZeroMQ message is what this checks.
    client = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, encoding=encoding,
                      shared_memory="off")
    try:
        client.register()
        grad = torch.empty(n)
        total = torch.zeros(n)
        for step in range(1, 6):
            grad.copy_(torch.arange(n) % 7 + step)
            total += grad
            out = client.push_pull([grad])[0]
            assert torch.equal(out.float(), -total), f"push {step} carried stale contents"
        assert client.encoder.codec._frames[0][0] is (grad if encoding == "none" else client.encoder.codec._buffers[0])
    finally:
        client.close()
