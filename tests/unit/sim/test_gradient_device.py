"""`sim.gradient_device`: the simulated workers' gradients on a device. Here the CPU is the
device: the same code (a copy of the model there, parameters and batches moved to it, the
gradients brought back into the workers' buffers) runs, vectorised or one by one, and must
equal the exact path within RTOL. cuda without a device is refused in one line."""
import pytest
import torch
from sgd_reference import cfg_for

from psgd.config import ConfigError, load_config
from psgd.config.sim import GradientDevice
from psgd.sim.batched import RTOL, gradient_device, max_relative_error
from psgd.sim.executor import Executor
from psgd.sim.plan import check_plan

K = 4
CPU = torch.device("cpu")


def _cfg():
    return cfg_for("asp", K, **{"cluster.servers": 3, "task.model": "cnn1d", "task.dataset": "mnist1d",
                                "task.batch_size": 8, "task.dataset_args": "{num_samples: 400}",
                                "task.model_args": "{channels: 8}"})


def _distinct_versions(executors):
    gen = torch.Generator().manual_seed(2)
    for ws in zip(*(ex.workers for ex in executors)):
        own = [p + 0.05 * torch.randn(p.shape, generator=gen) for p in ws[0].params]
        for w in ws:
            w.params = [p.clone() for p in own]


@pytest.mark.parametrize("batched", [True, False], ids=["vectorised", "one-by-one"])
def test_the_device_path_equals_the_exact_path(batched):
    cfg = _cfg()
    # Off the CPU, an executor computes one by one through the batcher; with the CPU as the device
    # that batcher is made here, as the executor makes it for a device.
    on_device = Executor(cfg, batched=True, device=CPU) if batched else _with_device_batcher(cfg)
    exact = Executor(cfg, batched=False)
    assert on_device.batcher is not None and on_device.batcher.vectorize is batched and exact.batcher is None
    assert on_device.batcher.model is not on_device.model  # the device's own copy
    _distinct_versions([on_device, exact])
    steps = {r: 0.0 for r in range(K)}
    got, want = on_device.compute_together(steps), exact.compute_together(steps)
    assert on_device.batched_steps == K and on_device.batch_fallback is None
    for r in range(K):
        err = max_relative_error([p.grad for p in got[r]], [p.grad for p in want[r]])
        assert err <= RTOL, (r, err)
        assert on_device.workers[r].last_loss == pytest.approx(exact.workers[r].last_loss, rel=1e-6)
    assert not torch.allclose(got[0][0].grad, got[1][0].grad)


def _with_device_batcher(cfg):
    """An executor whose one-by-one gradients go through the device path with the CPU as the device."""
    from psgd.sim.batched import BatchedGradients
    ex = Executor(cfg, batched=False)
    ex.batcher = BatchedGradients(ex.model, ex.binding, ex.task, CPU, vectorize=False)
    return ex


def test_auto_and_cpu_name_a_device_this_machine_has():
    assert gradient_device(GradientDevice.CPU) == CPU
    assert gradient_device(GradientDevice.AUTO).type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_device_is_refused_before_the_run():
    cfg = load_config(None, ["sim.gradient_device=cuda"])
    with pytest.raises(ConfigError, match="sim.gradient_device: cuda") as err:
        check_plan(cfg)
    assert "\n" not in str(err.value)
