"""workers.device_ms on launched runs: every real step's recorded compute time is at
least its stated device time, drawn per (seed, rank, step) as the simulator draws
it, and a straggler's delay is a multiple of that padded time."""
import pytest
from conftest import launch, read_events, write_config

from psgd.config import load_config
from psgd.workers.device_time import DeviceClock

pytestmark = pytest.mark.e2e

DEVICE_MS, JITTER, STEPS = 25, 0.5, 24


def _config(tmp_path, **sections):
    base = dict(cluster={"servers": 1, "workers": 2}, train={"steps_per_worker": STEPS, "max_time_s": 60,
                                                             "target_accuracy": None},
                eval={"every_s": 5.0}, sim={"compute_jitter": JITTER})
    base.update(sections)
    base["workers"] = {"device": "cpu", "device_ms": DEVICE_MS, **sections.get("workers", {})}
    return write_config(tmp_path / "config.yaml", **base)


def _device_times(config, rank):
    clock = DeviceClock.from_config(load_config(config), rank)
    return [clock.step_s(k) for k in range(STEPS)]


@pytest.mark.timeout(120)
def test_each_worker_step_computes_for_at_least_its_drawn_device_time(tmp_path):
    config = _config(tmp_path, consistency={"mode": "asp"}, workers={"slowdown": {1: 3.0}})
    code, output, summary = launch(config, tmp_path / "run")
    assert code == 0, output
    steps = [e for e in read_events(tmp_path / "run") if e["event"] == "step" and e["role"] == "worker"]
    for rank in (0, 1):
        mine = sorted((e for e in steps if e["rank"] == rank), key=lambda e: e["clock"])
        assert [e["clock"] for e in mine] == list(range(1, STEPS + 1))
        device = _device_times(config, rank)
        # compute_s is rounded to the microsecond in the event
        short = [(e["clock"], e["compute_s"], device[e["clock"] - 1]) for e in mine
                 if e["compute_s"] < device[e["clock"] - 1] - 1e-6]
        assert not short, short
    # The drawn device times vary (a flat wait of device_ms would fall short of the longer ones).
    assert max(_device_times(config, 0)) > 1.3 * DEVICE_MS / 1e3
    for e in (e for e in steps if e["rank"] == 1):  # slowed 3x: it waited 2x its padded compute more
        assert e["step_s"] - e["comm_s"] >= 3 * e["compute_s"] - 1e-5
    # Each role's CPU while it trained, as its processes measured it (user + system, every thread).
    cpu, system = summary["role_cpu_s"], summary["role_sys_s"]
    assert set(cpu) == set(system) == {"worker", "server"}
    assert all(0 <= system[role] <= cpu[role] for role in cpu) and cpu["worker"] > 0 and cpu["server"] > 0


@pytest.mark.timeout(120)
def test_the_all_reduce_baseline_waits_out_the_same_device_times(tmp_path):
    config = _config(tmp_path, consistency={"mode": "allreduce"})
    code, output, _ = launch(config, tmp_path / "run")
    assert code == 0, output
    steps = [e for e in read_events(tmp_path / "run") if e["event"] == "step"]
    assert len(steps) == 2 * STEPS
    for e in steps:
        assert e["compute_s"] >= _device_times(config, e["rank"])[e["clock"] - 1] - 1e-6, e
