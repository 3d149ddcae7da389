"""`psgd sim profile`'s worker-loop probe against real processes: the worker role and a shard run, the
worker's done event splits its CPU by phase, and the probe reads every step's phases from it."""
import pytest

from psgd.sim import profile_worker
from psgd.sim.host_profile import load_host_profile

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_the_worker_loop_probe_reads_a_real_workers_cpu_by_phase(tmp_path, monkeypatch):
    monkeypatch.setattr(profile_worker, "PROBE_STEPS", 8)
    point = profile_worker._point(profile_worker.PROBE_WIDTHS[0], load_host_profile("cpu-reference"), tmp_path)
    assert point.nbytes > 0 and point.step_s > 0 and point.exchange_s > 0 and point.loop_s > 0
    assert point.compute_s > 0 and point.parts_exchange_s > 0  # what the profile's parts charge the same step
