"""`psgd sim calibrate`: the sim: section is computed from the run's events as documented."""
import json
import math
import random
import statistics

import pytest
import yaml

from psgd.config import ConfigError, dump_config, load_config
from psgd.sim.calibrate import calibrate


def _run_dir(tmp_path, comm_ms, compute_ms=(3.0,), busy=(0.5, 0.7), requests=(1000, 1000)):
    cfg = load_config(None, ["cluster.servers=2", "cluster.workers=2"])
    (tmp_path / "config.yaml").write_text(dump_config(cfg))
    events = [{"role": "server", "index": s, "event": "ready", "numel": 1000} for s in range(2)]
    for i, c in enumerate(comm_ms):
        events.append({"role": "worker", "index": i % 2, "event": "step", "rank": i % 2, "loss": 1.0,
                       "compute_s": compute_ms[i % len(compute_ms)] / 1e3, "comm_s": c / 1e3})
    events += [{"role": "server", "index": s, "event": "server_stats", "final": True, "busy_s": busy[s],
                "requests": requests[s]} for s in range(2)]
    events += [{"role": "worker", "index": r, "event": "done", "pushes": 10, "bytes_sent": 10 * 2 * 4000}
               for r in range(2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return cfg


def test_the_section_comes_from_the_events(tmp_path):
    comm = [1.0 + 0.1 * i for i in range(11)]  # median 1.5 ms
    cfg = _run_dir(tmp_path, comm)
    found = calibrate(tmp_path)
    assert found.sim["compute_ms"] == pytest.approx(3.0)
    assert found.sim["compute_jitter"] == 0.0  # every step computed for 3 ms
    service_s = (0.5 + 0.7) / 2000
    apply_s = 4 * 1000 / (cfg.sim.apply_gbytes_per_s * 1e9)
    assert found.sim["request_us"] == pytest.approx((service_s - apply_s) * 1e6, abs=1e-3)
    transfers_s = (4000 + 4000) / (cfg.sim.bandwidth_gbps * 1e9 / 8)
    assert found.sim["latency_us"] == pytest.approx((1.5e-3 - service_s - transfers_s) / 2 * 1e6, abs=1e-3)
    assert found.evidence["push_bytes_per_shard"] == 4000
    # The calibrated config is a valid config with exactly that section.
    again = load_config(yaml.safe_load(dump_config(found.config(cfg))))
    assert again.sim.compute_ms == found.sim["compute_ms"] and again.sim.latency_us == found.sim["latency_us"]


def test_the_compute_spread_becomes_the_jitter(tmp_path):
    # Step times that are a lognormal's exact quantiles: median 20 ms, CV 0.4.
    cv, n = 0.4, 2001
    sigma = math.sqrt(math.log1p(cv ** 2))
    normal = statistics.NormalDist()
    compute = [20.0 * math.exp(sigma * normal.inv_cdf((i + 0.5) / n)) for i in range(n)]
    random.Random(0).shuffle(compute)
    _run_dir(tmp_path, [1.0] * n, compute_ms=compute)
    found = calibrate(tmp_path)
    assert found.sim["compute_jitter"] == pytest.approx(cv, rel=0.01)
    # compute_ms is the lognormal's mean, so the jittered steps keep the real median
    assert found.sim["compute_ms"] == pytest.approx(20.0 * math.exp(sigma ** 2 / 2), rel=0.005)
    assert found.evidence["compute_ms_median"] == pytest.approx(20.0, rel=1e-3)


def test_a_round_trip_faster_than_the_service_gives_no_negative_latency(tmp_path):
    _run_dir(tmp_path, [0.1] * 11, busy=(5.0, 5.0))
    assert calibrate(tmp_path).sim["latency_us"] == 0.0


def test_runs_that_cannot_calibrate_say_why(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        calibrate(tmp_path)
    _run_dir(tmp_path, [1.0] * 3)
    with pytest.raises(ConfigError, match="too few"):
        calibrate(tmp_path)
