"""A REGISTER resent on a connection whose shared-memory offer was already settled
(a retry under load) keeps the segment and the doorbell: the pushes that follow go
through shared memory, and none is refused with bad_shm (issue 39, item 5)."""
from __future__ import annotations

import pytest
import torch

from psgd.bench.procs import BenchShards
from psgd.wire import protocol as P
from psgd.wire.shm import segment as shm
from psgd.workers.client import PSClient

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not shm.available(), reason="no sealable memfd here")]


@pytest.mark.timeout(60)
def test_a_resent_register_keeps_the_settled_segment_and_pushes_still_apply():
    numel = 4096
    with BenchShards(numel, 1, workers=1) as cluster:
        client = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, token=cluster.token,
                          shared_memory_min_bytes=0, request_timeout_s=10, max_retries=0)
        try:
            client.register()
            assert client.shared_memory == [True] and client._shm.bells.get(0) is not None
            assert [ack.applied for ack in client.push([torch.ones(numel)])] == [True]
            seg, bell = client._shm.segment(0), client._shm.bells.get(0)
            again = P.Register(req=client._rpc.next_id(), rank=0, fingerprint=cluster.layout.fingerprint,
                               token=cluster.token, shm=seg.name, shm_token=seg.token_hex, bell=bell.name)
            welcome, _ = client._rpc.call({0: P.encode(again)}, max_retries=0)[0]
            assert welcome.shm and welcome.bell
            before = client.stats()[0]["counters"]["bell_requests"]
            for _ in range(3):
                assert [ack.applied for ack in client.push([torch.ones(numel)])] == [True]
            counters = client.stats()[0]["counters"]
            assert counters["shm_attached"] == 2 and counters.get("shm_refused", 0) == 0
            assert counters.get("bad_requests_bad_shm", 0) == 0 and counters.get("bells_refused", 0) == 0
            assert counters["bell_requests"] > before  # the pushes after the resend still rang the same bell
            assert client.stats()[0]["version"] == 4
        finally:
            client.shutdown_servers(token=cluster.token)
            client.close()
