"""The simulated step time in hardware terms (psgd.sim.compute, psgd.sim.flops,
psgd.config.sim_devices): FLOPs on a device profile by default, the same on every
machine; the local machine measured only when asked, and that figure recorded."""
import json

import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.config.sim_devices import DEVICES
from psgd.orchestrate.launchers.sim import SimLauncher
from psgd.sim.compute import ComputeSource, resolve_compute
from psgd.sim.flops import step_flops
from psgd.tasks import build_model, load_task

SETS = ["task.model=mlp", "task.dataset=digits", "task.batch_size=16", "cluster.servers=2", "cluster.workers=3",
        "consistency.mode=ssp", "consistency.staleness=1", "train.steps_per_worker=15", "eval.every_s=0.002",
        "cluster.launcher=sim"]


def test_the_flops_of_a_step_are_the_matrix_products_of_forward_and_backward():
    cfg = load_config(None, SETS)
    task = load_task(cfg, None, splits=("train",))
    linears = [m for m in build_model(cfg, task).modules() if isinstance(m, torch.nn.Linear)]
    b = cfg.task.batch_size
    forward = sum(2 * b * m.in_features * m.out_features for m in linears)
    # Backward: every layer's weight gradient, and the input gradient of all but the first
    # (the data needs none), each as many FLOPs as its forward product.
    backward = forward + forward - 2 * b * linears[0].in_features * linears[0].out_features
    assert step_flops(cfg, task) == forward + backward


def test_a_device_profile_turns_flops_into_milliseconds():
    cfg = load_config(None, SETS + ["sim.device=a100-bf16"])
    task = load_task(cfg, None, splits=("train",))
    found = resolve_compute(cfg, task)
    a100 = DEVICES["a100-bf16"]
    assert found.source is ComputeSource.FLOPS and found.flops == step_flops(cfg, task)
    assert found.compute_ms == pytest.approx(a100.step_overhead_us / 1e3 + found.flops / (312e12 * 0.5) * 1e3,
                                             rel=1e-12)
    half = resolve_compute(load_config(None, SETS + ["sim.device=a100-bf16", "sim.efficiency=0.25"]), task)
    assert half.compute_ms - a100.step_overhead_us / 1e3 == pytest.approx(2 * (found.compute_ms - 0.1), rel=1e-12)
    given = resolve_compute(load_config(None, SETS + ["sim.device=a100-bf16", "sim.compute_ms=7"]), task)
    assert given.source is ComputeSource.CONFIG and given.compute_ms == 7.0  # compute_ms overrides


def test_a_user_defined_device_in_yaml():
    mine = "sim.devices={tpu9: {peak_tflops: 2.0, efficiency: 0.5, step_overhead_us: 40, host_gbytes_per_s: 10}}"
    cfg = load_config(None, SETS + [mine, "sim.device=tpu9"])
    found = resolve_compute(cfg, load_task(cfg, None, splits=("train",)))
    assert found.compute_ms == pytest.approx(0.04 + found.flops / 1e12 * 1e3, rel=1e-12)
    assert found.describe()["device"] == "tpu9" and found.describe()["peak_tflops"] == 2.0
    with pytest.raises(ConfigError, match="sim.device: unknown device profile 'tpu10'"):
        load_config(None, SETS + [mine, "sim.device=tpu10"])
    with pytest.raises(ConfigError, match=r"sim.devices\[x\].efficiency"):
        load_config(None, SETS + ["sim.devices={x: {peak_tflops: 1, efficiency: 2}}"])


def test_every_shipped_profile_is_a_valid_device():
    assert {"cpu", "v100", "a100", "h100", "h200", "l4"} <= set(DEVICES)
    for name, profile in DEVICES.items():
        assert profile.peak_tflops > 0 and 0 < profile.efficiency <= 1, name
        assert (profile.host_gbytes_per_s is None) == (name == "cpu"), name  # accelerators copy to the host


def launch(tmp_path, name, sets):
    run_dir = tmp_path / name
    run_dir.mkdir()
    result = SimLauncher(load_config(None, SETS + sets), run_dir).run()
    assert result.code == 0, result.reason
    return run_dir


def test_acceptance_1_two_launches_without_compute_ms_give_identical_files(tmp_path):
    a, b = launch(tmp_path, "a", []), launch(tmp_path, "b", [])
    for name in ("metrics.jsonl", "model.pt", "config.yaml"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    summary = json.loads((a / "summary.json").read_text())
    assert summary["sim_compute"]["source"] == "flops" and summary["sim_compute"]["device"] == "cpu"
    assert load_config(a / "config.yaml").sim.compute_ms is None  # nothing of this machine recorded


def test_measure_is_only_when_asked_and_the_figure_is_recorded(tmp_path):
    run_dir = launch(tmp_path, "measured", ["sim.compute_ms=measure", "sim.warmup_steps=3"])
    recorded = load_config(run_dir / "config.yaml").sim.compute_ms
    summary = json.loads((run_dir / "summary.json").read_text())
    assert isinstance(recorded, float) and recorded > 0
    assert summary["sim_compute"] == {"compute_ms": recorded, "source": "measured", "speedup": 1.0}
    # Rerunning the recorded config repeats the run bit for bit, without measuring again.
    again = tmp_path / "again"
    again.mkdir()
    assert SimLauncher(load_config(run_dir / "config.yaml"), again).run().code == 0
    assert (again / "metrics.jsonl").read_bytes() == (run_dir / "metrics.jsonl").read_bytes()
    assert json.loads((again / "summary.json").read_text())["sim_compute"]["source"] == "config"
