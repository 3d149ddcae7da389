"""summary.json's shard counters keep the names the shard counts them by,
summed over the shards' latest server_stats events."""
import torch

from psgd.config import load_config
from psgd.orchestrate.records.summary import summarize
from psgd.servers.state import PushStatus, ShardState


def _shard(cfg, index: int, resends: int) -> dict:
    state = ShardState(cfg, index, torch.zeros(2))
    state.register(0, now=0.0)
    grad = torch.ones(2)
    assert state.push(0, 0, 0, 0, grad).status is PushStatus.APPLIED
    for _ in range(resends):  # the same seq again: a resend after a lost acknowledgement
        assert state.push(0, 0, 0, 0, grad).status is PushStatus.DUPLICATE
    return {"event": "server_stats", "role": "server", "index": index, **state.stats()}


def test_resent_pushes_leave_the_shards_as_duplicates():
    cfg = load_config(None, ["consistency.mode=asp", "cluster.workers=1", "cluster.servers=2"])
    stats = [_shard(cfg, 0, resends=2), _shard(cfg, 1, resends=1)]
    assert [s["counters"]["duplicates"] for s in stats] == [2, 1]
    summary = summarize(cfg, stats, wall_time_s=1.0)
    assert summary["duplicates"] == 3
    assert "duplicate_pushes" not in summary


def test_all_reduce_ranks_count_their_gradient_bytes_as_workers_count_their_pushes():
    cfg = load_config(None, ["consistency.mode=allreduce", "cluster.workers=2", "task.batch_size=8"])
    events = [{"event": "step", "role": "allreduce", "rank": r, "clock": c} for r in (0, 1) for c in (1, 2, 3)]
    events += [{"event": "done", "role": "allreduce", "rank": r, "steps": 3, "bytes_sent": 3 * 400} for r in (0, 1)]
    summary = summarize(cfg, events, wall_time_s=1.0)
    assert summary["wire_bytes_sent"] == 2400
    assert summary["wire_bytes_per_example"] == 2400 / (6 * 8)
    assert summary["compression_ratio"] is None  # all-reduce sends fp32 and does not count it apart


def test_the_codecs_own_time_sums_the_workers_encoding_and_the_shards_decoding():
    cfg = load_config(None, ["consistency.mode=asp", "cluster.workers=2", "cluster.servers=2"])
    events = [{"event": "done", "role": "worker", "rank": r, "steps": 1, "bytes_sent": 8, "encode_s": 0.25 * (r + 1)}
              for r in (0, 1)]
    events += [{"event": "server_stats", "role": "server", "index": s, "version": 1,
                "counters": {"decode_us": 125_000 * (s + 1)}} for s in (0, 1)]
    summary = summarize(cfg, events, wall_time_s=1.0)
    assert summary["codec_encode_s"] == 0.75 and summary["codec_decode_s"] == 0.375


def test_the_codecs_own_time_is_none_where_nobody_measured_it():
    cfg = load_config(None, ["consistency.mode=asp", "cluster.workers=1", "cluster.servers=1"])
    events = [{"event": "done", "role": "worker", "rank": 0, "steps": 1, "bytes_sent": 8},
              {"event": "server_stats", "role": "server", "index": 0, "version": 1, "counters": {}}]
    summary = summarize(cfg, events, wall_time_s=1.0)
    assert summary["codec_encode_s"] is None and summary["codec_decode_s"] is None
