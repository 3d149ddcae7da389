"""GPU-worker code paths, checked on CPU: device choice, the distributed
backend, and ModelSync's exact, allocation-free parameter and gradient moves."""
import torch

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.tasks import build_model, load_task
from psgd.workers.model_sync import ModelSync


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
