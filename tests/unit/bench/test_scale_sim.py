"""bench scale's light workers on the virtual cluster: the time model's arithmetic,
exactly (1 worker: one round trip per cycle; many: the shard's service bounds it)."""
import pytest

from psgd.bench.scale_sim import calibrate_from_point, calibrate_wake, simulate_scale_point

NUMEL = 16384  # 64 KB
SIM = {"compute_ms": 20.0, "request_us": 100.0, "latency_us": 150.0, "bandwidth_gbps": 25.0, "apply_gbytes_per_s": 15.0}


def _round_trip_s(sim, shards=1):
    per = NUMEL // shards
    return (4 * sim["latency_us"] / 1e6 + sim["request_us"] / 1e6 + 4 * per / (sim["apply_gbytes_per_s"] * 1e9)
            + 2 * 4 * per / (sim["bandwidth_gbps"] * 1e9 / 8))


def test_one_light_worker_does_one_round_trip_per_step():
    p = simulate_scale_point(1, 1, NUMEL, SIM, warmup_s=1.0, window_s=3.0)
    cycle = SIM["compute_ms"] / 1e3 + _round_trip_s(SIM)
    assert p["pull_latency_ms_median"] == pytest.approx(_round_trip_s(SIM) * 1e3, abs=1e-3)
    assert abs(p["updates_per_s"] - 1 / cycle) <= 1 / 3.0  # whole round trips in a 3 s window


def test_a_saturated_shard_serves_one_request_per_service_time():
    sim = {**SIM, "request_us": 2000.0}  # 64 workers x 2 ms > the 20 ms step: the shard is the bottleneck
    p = simulate_scale_point(1, 64, NUMEL, sim, warmup_s=1.0, window_s=3.0)
    service = sim["request_us"] / 1e6 + 4 * NUMEL / (sim["apply_gbytes_per_s"] * 1e9)
    assert p["updates_per_s"] == pytest.approx(1 / service, rel=0.01)


def test_calibration_from_a_point_reproduces_it():
    row = {"shards": 1, "workers": 1, "updates_per_s": 45.0, "pull_latency_ms_median": 1.2, "shard_cpu_cores": 0.009}
    sim = calibrate_from_point(row, NUMEL)
    assert sim["request_us"] == pytest.approx(0.009 / 45.0 * 1e6 - 4 * NUMEL / 15e9 * 1e6, abs=1e-3)
    p = simulate_scale_point(1, 1, NUMEL, sim, window_s=20.0)
    assert p["pull_latency_ms_median"] == pytest.approx(1.2, abs=1e-3)
    assert p["updates_per_s"] == pytest.approx(45.0, abs=1 / 20.0)


def test_calibration_from_a_two_shard_point_reproduces_it():
    # The worker's one link carries its push to, and the reply from, both shards: the latency is what
    # is left after those transfers, so the simulated round trip is the measured one again.
    row = {"shards": 2, "workers": 1, "updates_per_s": 45.0, "pull_latency_ms_median": 1.2, "shard_cpu_cores": 0.018}
    sim = calibrate_from_point(row, NUMEL)
    p = simulate_scale_point(2, 1, NUMEL, sim, window_s=20.0)
    assert p["pull_latency_ms_median"] == pytest.approx(1.2, abs=1e-3)


def test_the_wake_split_reproduces_a_loaded_points_service_and_keeps_the_lone_one():
    base = {"shards": 1, "workers": 1, "updates_per_s": 45.0, "pull_latency_ms_median": 1.2, "shard_cpu_cores": 0.027}
    loaded = {"shards": 1, "workers": 16, "updates_per_s": 700.0, "shard_cpu_cores": 0.14}  # 200 us per request
    sim = calibrate_wake(base, loaded, NUMEL, calibrate_from_point(base, NUMEL))
    lone_us = 0.027 / 45.0 * 1e6 - 4 * NUMEL / 15e9 * 1e6
    assert sim["wake_us"] > 0 and sim["request_us"] + sim["wake_us"] == pytest.approx(lone_us, abs=2e-3)
    assert simulate_scale_point(1, 16, NUMEL, sim)["service_us_mean"] == pytest.approx(200.0, rel=0.01)
    one = simulate_scale_point(1, 1, NUMEL, sim, window_s=20.0)  # every request wakes the shard: as before
    assert one["idle_share"] == 1.0
    assert one["updates_per_s"] == pytest.approx(45.0, abs=1 / 20.0)
