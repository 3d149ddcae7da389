"""Replies in a reply encoding (wire.compression.replies) between real shards and a
real worker, in process: the worker trains on exactly the decoded parameters (its
registration's too), over TCP and through shared memory; the evaluator still reads
fp32; the worker counts its pulled bytes by the codec's rule."""
import dataclasses

import pytest
import torch
from sgd_reference import STEPS, cfg_for, reference_on_replies

import psgd
from psgd.tasks import build_model, load_task, worker_batches
from psgd.wire.replies import reply_nbytes
from psgd.wire.shm import segment as shm
from psgd.workers.client import PSClient


def train(cfg, shards, steps):
    """`steps` of psgd.Optimizer on the config's one worker; (optimizer stats, shards, client spy)."""
    task = load_task(cfg)
    model = build_model(cfg, task)
    served = shards(cfg, model)
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, servers=served.addresses))
    batches = worker_batches(len(task.y_train), 0, 1, cfg.task.batch_size, cfg.run.seed)
    through_shm = []
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        shm_params = opt.client._shm_params
        opt.client._shm_params = lambda s, rec, slot=0: through_shm.append(rec.encoding) or shm_params(s, rec, slot)
        for _ in range(steps):
            idx = next(batches)
            opt.zero_grad()
            task.loss(model(task.x_train[idx]), task.y_train[idx]).backward()
            opt.step()
        stats, shared = opt.stats, opt.client.shared_memory
    return stats, served, shared, through_shm


@pytest.mark.parametrize("compression, encoding, shared_memory", [("int8", "int8", "off"), ("int4", "int4", "off"),
                                                                  ("fp16", "fp16", "auto"), ("bf16", "bf16", "auto")])
def test_a_worker_trains_on_exactly_the_decoded_replies(shards, compression, encoding, shared_memory):
    cfg = cfg_for("asp", 1, **{"wire.compression": f"{{replies: {compression}}}", "checkpoint.enabled": "false",
                               "workers.device": "cpu", "wire.shared_memory": shared_memory,
                               "wire.shared_memory_min_bytes": 0})
    stats, served, shared, through_shm = train(cfg, shards, STEPS)
    expected = reference_on_replies(cfg, STEPS, encoding)
    for server, flat in zip(served.servers, expected):
        assert torch.equal(server.state.params, flat)
    sizes = served.layout.shard_sizes
    assert stats.pull_bytes == STEPS * sum(reply_nbytes(encoding, n) for n in sizes)  # the welcome is not a pull
    assert stats.pull_fp32_bytes == STEPS * 4 * sum(sizes)
    assert stats.reply_decode_s > 0
    assert all("reply_encode_us" in server.state.counters for server in served.servers)  # the codec's own time
    if shared_memory == "auto" and shm.available():  # a dense reply lands in the segment, not on the socket
        assert shared == [True] * len(sizes)
        assert through_shm == [encoding] * (STEPS * len(sizes))
    else:
        assert through_shm == []


def test_fp32_replies_are_unchanged_and_the_evaluator_reads_fp32_in_any_reply_encoding(shards):
    cfg = cfg_for("asp", 1, **{"checkpoint.enabled": "false", "workers.device": "cpu"})
    stats, served, _, _ = train(cfg, shards, STEPS)
    for server, flat in zip(served.servers, reference_on_replies(cfg, STEPS, "none")):
        assert torch.equal(server.state.params, flat)
    assert "reply_encode_us" not in served.servers[0].state.counters and stats.reply_decode_s == 0.0

    int8 = cfg_for("asp", 1, **{"wire.compression": "{replies: int8}", "checkpoint.enabled": "false"})
    model = build_model(int8, load_task(int8))
    served = shards(int8, model)
    evaluator = PSClient(served.addresses, served.layout, rank=0, role="evaluator", heartbeat_s=None)
    try:
        for got in (evaluator.register(), evaluator.pull()):
            assert [torch.equal(g, s.state.params) for g, s in zip(got, served.servers)] == [True, True]
        assert evaluator.replies.wire_bytes == 4 * sum(served.layout.shard_sizes)  # one fp32 pull
    finally:
        evaluator.close()
