"""Streaming DiLoCo through real in-process shards: fragment pushes reach only their
shards, each shard keeps its own seq (a resend applies once), and one fragment with
tau 0 and alpha 0 trains exactly as DiLoCo does."""
import dataclasses

import pytest
import torch
from support.tiny_model import batches, net
from torch import nn

import psgd
from psgd.config import load_config

DILOCO = ["local.steps=4", "local.outer_lr=0.7", "local.outer_momentum=0.9", "local.outer_nesterov=true",
          "optimizer.name=adamw", "optimizer.lr=0.01"]


@pytest.fixture
def job(shards):
    def make(model, *sets):
        base = load_config(None, ["cluster.servers=2", "cluster.workers=1", "consistency.mode=bsp",
                                  "workers.device=cpu", "checkpoint.enabled=false", *sets])
        served = shards(base, model)
        return dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, servers=served.addresses)), served
    return make


def train(job, *sets, steps=10):
    model = net()
    cfg, served = job(model, *DILOCO, *sets)
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        for x, y in batches(steps):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        opt.flush()
        stats = opt.stats
    return [s.state.params.clone() for s in served.servers], [s.state.version for s in served.servers], stats


def test_one_fragment_without_delay_or_mixing_is_diloco_bit_for_bit(job):
    diloco, versions, dense = train(job)
    streaming, s_versions, stats = train(job, "local.fragments=1")
    assert versions == s_versions == [3, 3]  # 10 steps: two rounds of 4 and the flushed 2
    assert all(torch.equal(a, b) for a, b in zip(diloco, streaming))
    assert stats.bytes_sent == dense.bytes_sent and stats.peak_push_bytes == dense.peak_push_bytes


def test_two_fragments_halve_the_peak_push_and_each_shard_syncs_once_a_round(job):
    _, _, dense = train(job, steps=8)
    _, versions, stats = train(job, "local.fragments=2", "local.fragment_sync_delay=1",
                               "local.fragment_update_alpha=0.5", steps=8)
    # fragment 0 (shard 0) leaves after steps 2 and 6, and its steps 7-8 at the flush;
    # fragment 1 (shard 1) after steps 4 and 8
    assert versions == [3, 2] and stats.pushes == 5 and stats.clock == 2
    sizes = [4 * n for n in psgd.core.sharding.layout_for_module(net(), 2).shard_sizes]
    assert stats.bytes_sent == 3 * sizes[0] + 2 * sizes[1] and dense.bytes_sent == 2 * sum(sizes)
    assert stats.peak_push_bytes == max(sizes) and dense.peak_push_bytes == sum(sizes)
    assert dense.peak_push_bytes / stats.peak_push_bytes == pytest.approx(2, rel=0.05)


def test_a_fragment_push_reaches_only_its_shards_and_a_resend_applies_once(job):
    model = net()
    cfg, served = job(model)
    layout = served.layout
    client = psgd.PSClient(cfg.cluster.servers, layout, rank=0, heartbeat_s=None)
    try:
        client.register()
        delta = torch.full((layout.shard_sizes[1],), 0.25)
        first = client.start({1: delta})
        client.wait(first)
        client.shard_cursors[1].seq, client.shard_cursors[1].clock = 0, 0  # as if the reply had been lost
        client.wait(client.start({1: delta}))
        client.wait(client.start({0: torch.zeros(layout.shard_sizes[0])}))
    finally:
        client.close()
    s0, s1 = (s.state for s in served.servers)
    assert s1.version == 1 and s1.counters["duplicates"] == 1 and s1.last_seq[0] == 0
    assert s0.version == 1 and s0.last_seq[0] == 0  # its own first seq: no gap, no partial push
    assert s0.counters["partial_pushes"] == 0 and s1.counters["partial_pushes"] == 0
    assert [c.seq for c in client.shard_cursors] == [1, 1]
