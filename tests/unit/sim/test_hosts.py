"""Hosts in the time model: cores shared first come first served, one NIC per host, memory between roles
of one host, the step's work on a host profile, and the BSP release spread that the cores make grow with W."""
import statistics
from collections import defaultdict
from dataclasses import replace

import pytest

from psgd.config import ConfigError, load_config
from psgd.sim import Engine, Executor, TimeModel
from psgd.sim.compute import ComputeSource, resolve_compute
from psgd.sim.host_profile import Linear, load_host_profile
from psgd.sim.hosts import Cores
from psgd.sim.op_count import StepWork, work_of

TESTBED = "benchmarks/sim-validation/testbed.yaml"


def test_cores_serve_jobs_first_come_first_served_and_a_later_booking_leaves_its_gap():
    cores = Cores(2)
    assert [cores.run(0.0, 1.0) for _ in range(3)] == [1.0, 1.0, 2.0]  # the third waits for a core
    late = Cores(1)
    assert late.run(5.0, 1.0) == 6.0
    assert late.run(0.0, 2.0) == 2.0   # fits before the job booked at 5
    assert late.run(3.0, 2.5) == 8.5   # does not fit in 3..5: after it
    assert late.busy_s == 5.5


def test_a_linear_cost_fitted_on_two_points_goes_through_them():
    cost = Linear.fit((1000, 2e-5), (5000, 6e-5))
    assert cost.seconds(1000) == pytest.approx(2e-5) and cost.seconds(5000) == pytest.approx(6e-5)


def test_a_matrix_product_takes_the_rate_measured_at_its_size():
    profile = load_host_profile("cpu-reference")
    for flops, rate in zip(profile.matmul_flops, profile.matmul_flops_per_s):
        assert profile.matmul_s(flops) == pytest.approx(flops / rate)


def test_the_step_work_counts_every_product_and_costs_them_at_the_profile():
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    work = work_of(lambda: model(x).sum().backward())
    assert sum(work.products) == work.flops == 3 * 2 * 8 * (16 * 32 + 32 * 4) - 2 * 8 * 16 * 32  # no grad wrt x
    # the products and operations alone: no pass cost, the other operations' bytes at nothing
    profile = replace(load_host_profile("cpu-reference"), pass_us=0.0, memory_bytes=(), memory_bytes_per_s=())
    assert work.host_s(profile) == pytest.approx(work.ops * profile.dispatch_us / 1e6
                                                 + sum(profile.matmul_s(f) for f in work.products))


def test_hosts_are_checked_with_the_key_that_is_wrong():
    with pytest.raises(ConfigError, match=r"sim\.hosts\[box\]\.gpus: unknown key"):
        load_config(None, ["sim.hosts={box: {gpus: 2}}"])
    with pytest.raises(ConfigError, match=r"sim\.placement\.shards: 'cpu' is not a host kind"):
        load_config(None, ["sim.hosts={box: {cores: 2}}", "sim.placement.shards=cpu"])
    with pytest.raises(ConfigError, match=r"sim\.placement\.workers_per_host: places 4 workers"):
        load_config(None, ["sim.hosts={box: {count: 2, accelerators: 2}}", "cluster.workers=8"])
    with pytest.raises(ConfigError, match=r"sim\.hosts: are not modelled for allreduce"):
        load_config(None, ["sim.hosts={box: {cores: 2}}", "consistency.mode=allreduce"])
    with pytest.raises(ConfigError, match=r"sim\.hosts\[box\]\.cores: must be in"):
        load_config(None, ["sim.hosts={box: {cores: 0}}"])


def _run(cfg):
    events = []
    ex = Executor(cfg)
    compute = resolve_compute(cfg, ex.task)
    engine = Engine(ex, TimeModel.for_run(cfg, compute.compute_ms, ex.plans), steps_per_worker=cfg.train.steps_per_worker,
                    max_time_s=cfg.train.max_time_s, eval_every_s=None, emit=events.append)
    return engine, engine.run(), events


def _testbed(workers: int, *extra: str):
    return load_config(TESTBED, [f"cluster.workers={workers}", "consistency.mode=bsp", "train.steps_per_worker=4",
                                 "eval.enabled=false", "train.target_accuracy=null", *extra])


def release_spread_ms(events: list[dict], workers: int) -> float:
    """As benchmarks/sim-validation/explain.py measures it: per clock, the first worker's step to the last's."""
    by_clock = defaultdict(list)
    for e in events:
        if e.get("event") == "step":
            by_clock[e["clock"]].append(e["t"])
    return statistics.median(max(ts) - min(ts) for ts in by_clock.values() if len(ts) == workers) * 1e3


def test_the_bsp_release_spread_grows_with_the_workers_on_one_two_core_host():
    spreads = [release_spread_ms(_run(_testbed(w, "sim.hosts={box: {cores: 2}}"))[2], w) for w in (4, 8, 16)]
    assert spreads[0] < spreads[1] < spreads[2]
    # without hosts a clock's replies leave at once and only the links spread them
    assert release_spread_ms(_run(_testbed(16))[2], 16) < spreads[0]


def test_more_cores_shrink_the_spread():
    two = release_spread_ms(_run(_testbed(8, "sim.hosts={box: {cores: 2}}"))[2], 8)
    eight = release_spread_ms(_run(_testbed(8, "sim.hosts={box: {cores: 8}}"))[2], 8)
    assert eight < two


def test_a_message_between_roles_of_one_host_is_copied_at_the_memory_rate():
    engine, _, _ = _run(_testbed(2, "sim.hosts={box: {cores: 2}}", "train.steps_per_worker=1"))
    hosts = engine.hosts
    assert hosts.model.same_host(0, 0)
    assert hosts.message(0, 0, engine.net.worker_up[0], engine.net.shard_in[0], 1.0, 10**6, to_shard=True) == \
        1.0 + 10**6 / (hosts.model.profile.memory_gbytes_per_s * 1e9)


def test_workers_of_one_host_share_its_nic_and_shards_on_their_own_hosts_are_reached_over_it():
    cfg = _testbed(4, "sim.hosts={gpu: {count: 2, accelerators: 2}, cpu: {count: 1, cores: 4}}",
                   "sim.placement.shards=cpu", "cluster.servers=1", "train.steps_per_worker=1")
    engine, result, _ = _run(cfg)
    model = engine.hosts.model
    assert model.worker_host == [0, 0, 1, 1] and model.shard_host == [2]
    assert engine.net.worker_up[0] is engine.net.worker_up[1] is model.nic_up[0]
    assert engine.net.worker_up[2] is model.nic_up[1] and engine.net.shard_in[0] is model.nic_down[2]
    assert not model.same_host(0, 0) and result.steps == 4


def test_a_co_located_cluster_places_shard_s_on_worker_host_s_mod_h():
    cfg = _testbed(4, "sim.hosts={gpu: {count: 2, accelerators: 2}}", "cluster.servers=3",
                   "train.steps_per_worker=1")
    model = _run(cfg)[0].hosts.model
    assert model.shard_host == [0, 1, 0] and model.evaluator_host == 0


def test_a_step_from_the_host_profile_is_its_work_on_that_host():
    cfg = load_config(TESTBED, ["sim.device=profile", "workers.device_ms=null"])
    ex = Executor(cfg)
    found = resolve_compute(cfg, ex.task)
    from psgd.sim.op_count import step_work
    work = step_work(cfg, ex.task)
    assert found.source is ComputeSource.PROFILE
    assert found.compute_ms == work.host_s(load_host_profile("cpu-reference")) * 1e3 and found.ops == work.ops


def test_a_launch_cost_adds_the_operations_to_the_flops():
    base = load_config(TESTBED, ["workers.device_ms=null", "sim.device=mine",
                                 "sim.devices={mine: {peak_tflops: 1.0, efficiency: 0.5}}"])
    launched = load_config(TESTBED, ["workers.device_ms=null", "sim.device=mine",
                                     "sim.devices={mine: {peak_tflops: 1.0, efficiency: 0.5, launch_us: 7}}"])
    ex = Executor(base)
    without, with_launches = resolve_compute(base, ex.task), resolve_compute(launched, ex.task)
    assert with_launches.ops > 0 and with_launches.flops == without.flops
    assert with_launches.compute_ms == pytest.approx(without.compute_ms + with_launches.ops * 7 / 1e3)


def test_a_profile_that_lacks_the_runs_update_rule_is_named():
    from psgd.sim.hosts import HostModel
    profile = load_host_profile("cpu-reference")
    cfg = _testbed(2, "sim.hosts={box: {cores: 2}}")
    with pytest.raises(ConfigError, match="measures no shard apply for optimizer 'sgd'"):
        HostModel(cfg, replace(profile, apply={}), 1, StepWork(1, 0, ()), 4)


def test_a_hosts_turns_end_at_its_profiles_kernel_tick():
    from psgd.sim.hosts import HostModel
    profile = load_host_profile("cpu-reference")
    cfg = _testbed(2, "sim.hosts={box: {cores: 2}}")
    assert HostModel(cfg, replace(profile, tick_hz=250.0), 1, StepWork(1, 0, ()), 4).cores[0].tick_s == 1 / 250
    assert HostModel(cfg, replace(profile, tick_hz=None), 1, StepWork(1, 0, ()), 4).cores[0].tick_s == 0.0


def test_an_evaluator_on_the_workers_host_takes_their_cores_and_on_its_own_host_does_not():
    def run(evaluator: str):
        cfg = _testbed(2, "sim.hosts={box: {cores: 1}, ev: {cores: 1}}", f"sim.placement.evaluator={evaluator}",
                       "workers.device_ms=null", "sim.compute_ms=5", "eval.enabled=true", "eval.every_s=0.02")
        ex = Executor(cfg)
        engine = Engine(ex, TimeModel.for_run(cfg, resolve_compute(cfg, ex.task).compute_ms, ex.plans),
                        steps_per_worker=cfg.train.steps_per_worker, max_time_s=cfg.train.max_time_s,
                        eval_every_s=cfg.eval.every_s)
        return engine, engine.run()
    own, own_result = run("ev")
    shared, shared_result = run("colocated")
    assert own.hosts.model.cores[1].busy_s > 0 and shared.hosts.model.cores[1].busy_s == 0
    assert shared_result.end_s > own_result.end_s


def test_sim_profile_on_cuda_without_a_gpu_refuses_in_one_line(capsys):
    import torch

    from psgd.cli import main
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["sim", "profile", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA device" in err


def test_processor_sharing_runs_every_step_and_its_cores_do_the_work_charged():
    engine, result, events = _run(_testbed(8, "sim.hosts={box: {cores: 2}}", "sim.sharing=ps"))
    assert result.steps == 8 * 4
    model = engine.hosts.model
    assert sum(model.charged.values()) == pytest.approx(sum(c.busy_s for c in model.cores))
    steps = [e for e in events if e["event"] == "step"]
    assert all(e["comm_s"] >= 0 and e["step_s"] >= e["comm_s"] for e in steps)


def test_with_hosts_a_straggler_waits_a_multiple_of_its_compute_as_its_cores_gave_it():
    cfg = _testbed(2, "sim.hosts={box: {cores: 2}}", "workers.device_ms=0.01", "workers.slowdown={1: 4.0}",
                   "train.steps_per_worker=1")
    engine, _, events = _run(cfg)
    host_part = engine.hosts.model.host_part_s  # above the stated device time: the compute is the cores'
    first = {e["rank"]: e for e in events if e["event"] == "step"}
    assert first[0]["step_s"] - first[0]["comm_s"] == pytest.approx(host_part)
    assert first[1]["step_s"] - first[1]["comm_s"] == pytest.approx(4 * host_part)  # 3x more after it, as a real one
