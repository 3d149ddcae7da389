"""GPU-worker code paths, checked on CPU: device choice, the distributed
backend, and ModelSync's exact, allocation-free parameter and gradient moves."""
import pytest
import torch

from psgd.config import load_config
from psgd.devices import dist_backend
from psgd.sharding import layout_for_module
from psgd.tasks import build_model, load_task
from workers.model_sync import ModelSync, select_device


def test_dist_backend_is_nccl_on_cuda_and_gloo_on_cpu():
    assert dist_backend("cuda", nccl_available=True) == "nccl"
    assert dist_backend(torch.device("cuda", 1), nccl_available=True) == "nccl"
    assert dist_backend("cuda", nccl_available=False) == "gloo"
    assert dist_backend("cpu") == "gloo"
    with pytest.raises(ValueError, match="'meta'"):
        dist_backend("meta")


def test_cuda_without_gpu_is_a_clear_error_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="workers.device is 'cuda'"):
        select_device("cuda")
    assert select_device("auto") == torch.device("cpu")
    assert select_device("cpu") == torch.device("cpu")


def test_cuda_is_chosen_by_auto_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert select_device("auto") == torch.device("cuda")
    assert select_device("cuda") == torch.device("cuda")


def _model_and_sync(shards: int):
    cfg = load_config(None, [f"cluster.servers={shards}", "task.model=mlp", "task.dataset=digits"])
    task = load_task(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, task)
    layout = layout_for_module(model, shards)
    return task, model, layout, ModelSync(model, layout, torch.device("cpu"))


def test_load_copies_pulled_parameters_exactly_into_existing_storage():
    _, model, layout, sync = _model_and_sync(3)
    before = [p.data_ptr() for p in model.parameters()]
    pulled = [torch.randn(n) for n in layout.shard_sizes]
    sync.load(pulled)
    assert [p.data_ptr() for p in model.parameters()] == before  # copied in, not rebound
    # Reading the model back through the layout gives the pulled bits exactly.
    again = layout.flatten([p.detach() for p in model.parameters()])
    for got, want in zip(again, pulled):
        assert torch.equal(got, want)
    pulled[0].add_(1.0)  # the model does not alias the received frames
    assert not torch.equal(layout.flatten([p.detach() for p in model.parameters()])[0], pulled[0])


def test_gradients_round_trip_exactly_and_reuse_their_buffers():
    task, model, layout, sync = _model_and_sync(2)
    buffers = None
    for step in range(3):
        model.zero_grad(set_to_none=False)
        idx = torch.arange(step * 16, step * 16 + 16)
        task.loss(model(task.x_train[idx]), task.y_train[idx]).backward()
        grads = sync.gradients()
        ptrs = [g.data_ptr() for g in grads]
        if buffers is not None:
            assert ptrs == buffers  # the same host buffers every step
        buffers = ptrs
        assert all(g.dtype == torch.float32 and g.device.type == "cpu" for g in grads)
        assert [g.numel() for g in grads] == list(layout.shard_sizes)
        # Scattering the flat gradients back gives every parameter's .grad exactly.
        back = [torch.empty_like(p) for p in model.parameters()]
        layout.unflatten(grads, back)
        for b, p in zip(back, model.parameters()):
            assert torch.equal(b, p.grad)
