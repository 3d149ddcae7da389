"""A quorum's latecomer through psgd.Optimizer against real in-process shards: its delta is
merged late (counted), its clock moves on to the round in progress, and its own count of the
steps it trained does not jump with the clock (a worker stops at its budget of real steps)."""
import dataclasses

import torch
from torch import nn

import psgd
from psgd.config import load_config
from psgd.workers.client import PSClient


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 3))


def test_a_latecomer_is_merged_late_and_counts_only_the_steps_it_trained(shards):
    base = load_config(None, ["cluster.servers=2", "cluster.workers=2", "workers.device=cpu", "cluster.timeout_s=30",
                              "checkpoint.enabled=false", "consistency.mode=bsp", "local.steps=2",
                              "consistency.quorum.size=1"])
    cluster = shards(base, net())
    cfg = dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, servers=cluster.addresses))
    fast = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None)
    try:
        fast.register()
        model = net()
        g = torch.Generator().manual_seed(1)
        with psgd.Optimizer(model, cfg, rank=1) as opt:  # registered at clock 0
            for _ in range(3):  # three rounds merged, each by the fast worker alone (q = 1)
                fast.push_pull([torch.full((n,), 0.01) for n in cluster.layout.shard_sizes], steps=2)
            for _ in range(2):  # one round, pushed for clock 0: merged into round 3
                opt.zero_grad()
                nn.functional.cross_entropy(model(torch.randn(4, 5, generator=g)),
                                            torch.randint(0, 3, (4,), generator=g)).backward()
                opt.step()
            assert opt.clock == 3 and opt.steps_taken == 2  # its next push is for round 3, not trained rounds
    finally:
        fast.close()
    for shard in cluster.servers:
        assert shard.state.counters["quorum_carried"] == 1 and shard.state.version == 3  # held for round 3
