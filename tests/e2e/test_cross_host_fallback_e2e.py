"""Across hosts (two network namespaces joined by veth, the shard on a
/dev/shm of its own) a client that wants shared memory finds no segment on
the shard's side and stays on TCP, with the same results."""
from __future__ import annotations

import subprocess

import pytest

from psgd.bench.netns import NetnsPair, netns_supported
from psgd.bench.netns_comm import run_netns_row

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(netns_supported() is not None,
                                                  reason=str(netns_supported()))]


@pytest.mark.timeout(180)
def test_a_client_in_another_namespace_falls_back_to_tcp_and_namespaces_are_removed():
    row = run_netns_row(64 << 10, warmup=1, repeats=5)
    assert row["shared_memory"] is False
    assert len(row["psgd"]) == len(row["raw_sgd"]) == 5
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    # Only this process's pair: another test (multihost) may hold namespaces of its own right now.
    mine = NetnsPair()
    assert mine.server_ns not in left and mine.client_ns not in left
