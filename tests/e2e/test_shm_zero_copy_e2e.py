"""No avoidable copy on the same-host path, against real shard processes: a
worker's gradient is flattened (fp32) or encoded (fp16/bf16) straight into the
segment's request region and sent from there, and the model is loaded from the
reply region; the shard applies exactly what the TCP path gives it."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from psgd.bench.procs import BenchShards
from psgd.wire.shm import segment as shm
from psgd.wire.shm.segment import Segment
from psgd.workers.client import PSClient
from psgd.workers.model_sync import ModelSync

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not shm.available(), reason="no sealable memfd here")]


class Flat(nn.Module):
    """One parameter named as bench_layout names it, so the shards' layout fits."""

    def __init__(self, numel: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(numel))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("encoding", ["none", "fp16", "bf16"])
def test_gradients_go_from_the_segment_they_were_made_in(encoding, monkeypatch):
    numel = 30_000
    with BenchShards(numel, 1) as a, BenchShards(numel, 1) as b:
        fast = PSClient(a.addresses, a.layout, heartbeat_s=None, encoding=encoding, token=a.token,
                        shared_memory_min_bytes=0)
        tcp = PSClient(b.addresses, b.layout, heartbeat_s=None, encoding=encoding, token=b.token,
                       shared_memory="off")
        models = [Flat(numel), Flat(numel)]
        syncs = [ModelSync(m, a.layout, torch.device("cpu")) for m in models]
        syncs[0].gradient_buffers = fast.gradient_buffers
        syncs[1].gradient_buffers = tcp.gradient_buffers
        try:
            for sync, client in zip(syncs, (fast, tcp)):
                sync.load(client.register())
            seg = fast._shm.segment(0)
            assert fast.shared_memory == [True] and tcp.gradient_buffers() == [None]
            copied = []
            real_bytes = Segment._bytes
            monkeypatch.setattr(Segment, "_bytes", lambda self, data: copied.append(data) or real_bytes(self, data))
            gen = torch.Generator().manual_seed(1)
            for step in range(5):
                g = torch.randn(numel, generator=gen)
                for m in models:
                    m.w.grad = g.clone()
                grads = [sync.gradients() for sync in syncs]
                if encoding == "none":  # flattened straight into the request region
                    assert grads[0][0].data_ptr() == seg.request_tensor(torch.float32, numel).data_ptr()
                else:                  # the fp32 gradient stays private; its encoding goes into the region
                    assert grads[0][0].data_ptr() == syncs[0].host_grads[0].data_ptr()
                params = [client.push_pull(gr) for client, gr in zip((fast, tcp), grads)]
                # The parameters come back in the reply region and are loaded from there.
                assert seg._reply.data_ptr() == params[0][0].data_ptr()
                for sync, p in zip(syncs, params):
                    sync.load(p)
                assert torch.equal(models[0].w, models[1].w), f"step {step}: the two paths differ"
            assert copied == []  # nothing was copied into the segment to send it
            assert fast.stats()[0]["counters"]["shm_attached"] == 1
        finally:
            for c in (fast, tcp):
                c.shutdown_servers()
                c.close()


@pytest.mark.timeout(120)
def test_a_gradient_made_in_a_replaced_segment_is_copied_into_the_new_one():
    numel = 20_000
    with BenchShards(numel, 1) as cluster:
        client = PSClient(cluster.addresses, cluster.layout, heartbeat_s=None, token=cluster.token,
                          shared_memory_min_bytes=0)
        try:
            client.register()
            old = client.gradient_buffers()[0]
            old.fill_(1.0)
            client.register()  # a new segment, as after a shard restart
            assert client.gradient_buffers()[0].data_ptr() != old.data_ptr()
            out = client.push_pull([old])  # the payload lies in the old mapping, still valid
            torch.testing.assert_close(out[0], torch.full((numel,), -1e-6), rtol=0, atol=1e-12)
        finally:
            client.shutdown_servers()
            client.close()
