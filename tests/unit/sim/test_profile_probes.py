"""`psgd sim profile` end to end on tiny sizes, its timers replaced by a fixed cost per call: every
probe runs against today's code (the shard's service, the codecs, the kernels) and fills its keys."""
import pytest

from psgd.sim import profile, profile_compute, profile_requests, profile_worker
from psgd.sim.host_profile import HostProfile

CALL_S = 1e-3


def probed_ends(nbytes: int, requests: int, repeats: int) -> profile_requests.EndCosts:
    """The request probe's two processes (tests/e2e/test_request_probe_e2e.py runs them), made up:
    10 ms + 1 ns a byte at the worker, 20 ms + 2 ns a byte at the shard alone, 3 ms less queued."""
    return profile_requests.EndCosts(client_s=1e-2 + nbytes * 1e-9, client_send_share=0.3, shard_s=2e-2 + nbytes * 2e-9,
                                     shard_queued_s=1.7e-2 + nbytes * 2e-9)


def probed_loop(path, out) -> dict:
    """The worker-loop probe's two processes (tests/e2e/test_worker_loop_probe_e2e.py runs them), made up
    (above what the tiny probes' parts charge, each call a millisecond): per step, 1000 s + 10 ms a unit of
    hidden width in the step, 2 s + 0.1 ms a unit in the exchange, 0.3 ms in the loop and 0.1 ms on the
    other threads."""
    import yaml
    width = yaml.safe_load(path.read_text())["task"]["model_args"]["hidden"]
    steps = 10
    step, exchange, loop = steps * (1e3 + width * 1e-2), steps * (2 + width * 1e-4), steps * 3e-4
    return {"steps": steps, "step_cpu_s": step, "exchange_cpu_s": exchange, "loop_cpu_s": loop,
            "cpu_s": step + exchange + loop + steps * 1e-4}


@pytest.fixture
def tiny(monkeypatch):
    def once(fn, *args, **kwargs):
        fn()
        return CALL_S
    monkeypatch.setattr(profile, "_cpu_s", once)
    monkeypatch.setattr(profile.platform, "processor", lambda: "probe")  # not `uname -p`: no process
    monkeypatch.setattr(profile, "LARGE_BYTES", 1 << 16)
    monkeypatch.setattr(profile_compute, "_call_s", lambda dev, fn, min_s=0.0: once(fn))
    monkeypatch.setattr(profile_worker, "_run_roles", probed_loop)
    monkeypatch.setattr(profile_requests, "_measure_sizes",
                        lambda sizes, requests, repeats: {n: probed_ends(n, requests, repeats) for n in sizes})
    for name, value in (("ROTATE_BYTES", 1), ("MATMUL_SIZES", (4, 8)), ("CONV_WIDTHS", (2, 4)),
                        ("CONV_LENGTHS", (4, 8)), ("ATTENTION_LENGTHS", (4, 8)), ("MEMORY_NUMELS", (256, 1024))):
        monkeypatch.setattr(profile_compute, name, value)


def test_every_probe_runs_and_a_constant_step_time_is_all_pass_cost_and_no_dispatch(tiny):
    measured = profile.measure_host_profile("cpu")
    assert isinstance(measured, HostProfile) and measured.device == "cpu"
    assert set(measured.apply) and set(measured.encode) == set(measured.decode)
    # every depth of the dispatch probe took the same time: no cost per operation, all of it the pass's
    assert measured.dispatch_us == 0.0 and measured.pass_us == pytest.approx(CALL_S * 1e6)
    assert measured.matmul_flops == (2 * 4 ** 3, 2 * 8 ** 3)
    assert len(measured.conv_flops) == len(measured.conv_positions) == 4
    assert measured.conv_input_gradient_flops == measured.conv_weight_gradient_flops == measured.conv_flops
    assert sorted(set(measured.conv_positions)) == [32 * 4, 32 * 8]
    assert len(measured.attention_flops) == len(measured.attention_backward_flops) == 2
    assert len(measured.memory_bytes) == 2 and measured.memory_bytes[0] < measured.memory_bytes[1]
    assert HostProfile.from_dict(__import__("json").loads(measured.to_json())) == measured


def test_the_request_probe_keeps_what_each_end_spends_beyond_the_parts_measured_in_one_process(tiny):
    measured = profile.measure_host_profile("cpu")
    m, none, sgd = measured.message, (measured.encode["none"], measured.decode["none"]), measured.apply["sgd"]
    for n in (profile.SMALL_BYTES, profile.LARGE_BYTES):
        ends = probed_ends(n, 0, 0)
        parts_client = none[0].seconds(n) + 2 * m.seconds(n) + none[1].seconds(n)
        parts_shard = 2 * m.seconds(n) + none[1].seconds(n) + sgd.seconds(n) + none[0].seconds(n)
        assert measured.request_client.seconds(n) == pytest.approx(ends.client_s - parts_client, rel=1e-3)
        wake = 3e-3 * profile_requests.QUEUED / (profile_requests.QUEUED - 1)  # QUEUED requests share one wake-up
        assert measured.request_shard.seconds(n) == pytest.approx(ends.shard_s - wake - parts_shard, rel=1e-3)
    assert measured.request_client_send_share == 0.3 and measured.request_shard_wake_us == pytest.approx(4000.0)


def test_the_worker_loop_probe_keeps_what_the_real_loop_spends_beyond_the_parts_the_profile_charges():
    small = profile_worker.LoopPoint(nbytes=1000, step_s=5e-3, exchange_s=2e-3, loop_s=3e-4, compute_s=4e-3,
                                     parts_exchange_s=1.5e-3)
    large = profile_worker.LoopPoint(nbytes=5000, step_s=9e-3, exchange_s=3e-3, loop_s=5e-4, compute_s=6e-3,
                                     parts_exchange_s=2.3e-3)
    costs = profile_worker.loop_costs(small, large)
    for p in (small, large):  # through both points: what each step spent beyond its parts' charges
        assert costs.step_extra.seconds(p.nbytes) == pytest.approx(p.step_s - p.compute_s, rel=1e-3)
        assert costs.exchange_extra.seconds(p.nbytes) == pytest.approx(p.exchange_s - p.parts_exchange_s, rel=1e-3)
    assert costs.loop_us == pytest.approx(400.0)
    assert profile_worker.loop_costs(small, large, with_step=False).step_extra is None  # a cuda profile's compute


def test_the_profile_keeps_the_worker_loop_probe_and_reads_back_without_it(tiny):
    measured = profile.measure_host_profile("cpu")
    assert measured.worker_step_extra is not None and measured.worker_exchange_extra is not None
    assert measured.worker_loop_us == pytest.approx(300 + 100)  # the loop and the other threads, per step
    import json
    older = {k: v for k, v in json.loads(measured.to_json()).items()
             if k not in ("worker_step_extra", "worker_exchange_extra")}
    assert HostProfile.from_dict(older).worker_step_extra is None  # a profile from before the probe: nothing extra


def test_the_kernels_tick_is_read_from_its_configuration(tmp_path):
    import gzip
    kept = tmp_path / "config.gz"
    with gzip.open(kept, "wt") as f:
        f.write("CONFIG_HZ_250=y\nCONFIG_HZ=250\n")
    missing, other = tmp_path / "absent", tmp_path / "config"
    other.write_text("# CONFIG_HZ_1000 is not set\nCONFIG_HZ=1000\n")
    assert profile.kernel_tick_hz([(missing, open), (kept, gzip.open), (other, open)]) == 250.0
    assert profile.kernel_tick_hz([(missing, open)]) is None
