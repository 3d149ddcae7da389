"""The launcher's progress figures: staleness merged over every shard."""
import io

from psgd.config import load_config
from psgd.launcher import Launcher


def test_progress_staleness_merges_every_shards_latest_histogram(tmp_path):
    seen = []
    launcher = Launcher(load_config(None, ["cluster.servers=2"]), "config.yaml", [], tmp_path,
                        on_progress=lambda p: seen.append((p.staleness_mean, p.staleness_max)))
    launcher._metrics = io.StringIO()
    stats = lambda shard, hist: {"t": 1.0, "role": "server", "index": shard,  # noqa: E731
                                 "event": "server_stats", "version": 10, "staleness_hist": hist}
    launcher._record(None, stats(0, {"0": 2, "2": 2}))
    assert seen[-1] == (1.0, 2)
    launcher._record(None, stats(1, {"4": 1, "1": 1}))
    assert seen[-1] == (9 / 6, 4)            # both shards: 0,0,2,2,4,1
    launcher._record(None, stats(0, {"0": 2, "2": 4}))  # shard 0's newer cumulative histogram replaces its old one
    assert seen[-1] == (13 / 8, 4)
