"""Streaming DiLoCo on the virtual cluster: one fragment with tau 0 and alpha 0 is DiLoCo
bit for bit (synchronous and asynchronous), F fragments cut the peak push by F as the
workers' wire counters measure it, and tau hides the exchange behind inner steps."""
import pytest
import torch
from sgd_reference import cfg_for

from psgd.sim import simulate

DILOCO = {"local.steps": 4, "local.outer_lr": 0.7, "local.outer_momentum": 0.9, "local.outer_nesterov": "true",
          "optimizer.name": "adamw", "optimizer.lr": 0.01}


@pytest.mark.parametrize("mode, over", [("bsp", {}), ("asp", {"local.delayed_nesterov": "true"})],
                         ids=["diloco", "async-diloco"])
def test_one_fragment_without_delay_or_mixing_is_diloco_bit_for_bit(mode, over):
    dense, dense_run = simulate(cfg_for(mode, 3, **DILOCO, **over), 2.0)
    streaming, run = simulate(cfg_for(mode, 3, **DILOCO, **over, **{"local.fragments": 1}), 2.0)
    assert [s.version for s in streaming.shards] == [s.version for s in dense.shards]
    assert all(torch.equal(a.params, b.params) for a, b in zip(dense.shards, streaming.shards))
    assert run.end_s == dense_run.end_s
    assert [w.encoder.wire_bytes for w in streaming.workers] == [w.encoder.wire_bytes for w in dense.workers]


def test_four_fragments_cut_the_peak_push_by_four():
    sets = {**DILOCO, "cluster.servers": 4, "local.steps": 8}
    dense, _ = simulate(cfg_for("bsp", 2, **sets), 2.0)
    streaming, _ = simulate(cfg_for("bsp", 2, **sets, **{"local.fragments": 4}), 2.0)
    for d, s in zip(dense.workers, streaming.workers):
        assert d.peak_push_bytes == 4 * dense.layout.total  # fp32: the whole model at once
        assert s.peak_push_bytes == 4 * max(streaming.layout.shard_sizes)  # one shard's slice at a time
        assert d.peak_push_bytes / s.peak_push_bytes == pytest.approx(4, rel=0.05)
    # every shard syncs once per H = 8 steps, fragment f after steps 2(f+1) mod 8, and the
    # steps left after step 30 at the flush: shards 0 and 1 five times, 2 and 3 four
    assert [s.version for s in streaming.shards] == [5, 5, 4, 4]


def test_a_sync_delay_hides_the_exchange_on_a_slow_link():
    """A 1 Mb/s link makes each fragment's exchange last several steps: with tau 1 the
    worker computes through one of them instead of waiting."""
    slow = {**DILOCO, "local.fragments": 2, "sim.bandwidth_gbps": 0.001}
    waiting, waiting_run = simulate(cfg_for("asp", 2, **slow), 2.0)
    overlapped, run = simulate(cfg_for("asp", 2, **slow, **{"local.fragment_sync_delay": 1}), 2.0)
    assert run.steps == waiting_run.steps
    assert run.end_s < waiting_run.end_s
    assert not all(torch.equal(a.params, b.params) for a, b in zip(waiting.shards, overlapped.shards))
