"""The launcher's progress figures: staleness merged over every shard."""
from psgd.orchestrate.progress import ProgressTracker


def _stats(shard, hist):
    return {"t": 1.0, "role": "server", "index": shard, "event": "server_stats", "version": 10, "staleness_hist": hist}


def test_progress_staleness_merges_every_shards_latest_histogram():
    tracker = ProgressTracker(total_steps=100)
    p = tracker.record(_stats(0, {"0": 2, "2": 2}))
    assert (p.staleness_mean, p.staleness_max) == (1.0, 2)
    p = tracker.record(_stats(1, {"4": 1, "1": 1}))
    assert (p.staleness_mean, p.staleness_max) == (9 / 6, 4)            # both shards: 0,0,2,2,4,1
    p = tracker.record(_stats(0, {"0": 2, "2": 4}))  # shard 0's newer cumulative histogram replaces its old one
    assert (p.staleness_mean, p.staleness_max) == (13 / 8, 4)


def test_steps_count_and_updates_per_second_follow_the_events():
    tracker = ProgressTracker(total_steps=10)
    for t in (0.5, 1.0):
        tracker.record({"t": t, "event": "step"})
    p = tracker.record({"t": 2.0, "event": "server_stats", "version": 40, "staleness_hist": {}})
    assert (p.steps, p.updates, p.updates_per_s) == (2, 40, 20.0)
