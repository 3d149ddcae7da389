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


def test_taken_gradients_and_staged_parameters_leave_the_model_alone_until_swapped_in():
    """The pipelined worker's moves: gradients handed over (the model's .grad is None, a later
    backward writes fresh tensors), parameters staged beside the model and swapped in without a copy."""
    task, model, layout, sync = _model_and_sync(2)
    params = list(model.parameters())
    task.loss(model(task.x_train[:16]), task.y_train[:16]).backward()
    want = layout.flatten([p.grad.clone() for p in params])
    taken = sync.take_gradients()
    assert all(p.grad is None for p in params)
    task.loss(model(task.x_train[16:32]), task.y_train[16:32]).backward()  # the next step's backward
    for got, w in zip(sync.gradients(taken), want):
        assert torch.equal(got, w)  # the taken tensors were not touched by it
    held = layout.flatten([p.detach().clone() for p in params])
    pulled = [torch.randn(n) for n in layout.shard_sizes]
    sync.stage(pulled)
    for got, w in zip(layout.flatten([p.detach() for p in params]), held):
        assert torch.equal(got, w)  # staged: the model still computes on what it had
    sync.swap_in()
    assert list(model.parameters()) == params  # the same parameter objects, new storage
    for got, w in zip(layout.flatten([p.detach() for p in params]), pulled):
        assert torch.equal(got, w)


def test_adopted_reply_slots_become_the_parameters_and_are_never_written_as_spares():
    """With two reply slots, parameters held whole by one shard take the slot as their
    storage (no copy); split ones are copied. A slot the shard will fill again is never
    reused as a spare, and load() gives the model its own storage back."""
    task, model, layout, sync = _model_and_sync(2)
    params = list(model.parameters())
    whole = [v is not None for v in layout.whole_views([torch.zeros(n) for n in layout.shard_sizes])]
    assert any(whole) and not all(whole)  # this layout splits a parameter over the shards
    slots = [[torch.randn(n) for n in layout.shard_sizes] for _ in range(2)]
    sync.stage(slots[0], adopt=[True, True])
    sync.swap_in()
    for p, is_whole, got in zip(params, whole, layout.whole_views(slots[0])):
        assert (got is not None and p.data_ptr() == got.data_ptr()) == is_whole
    for got, w in zip(layout.flatten([p.detach() for p in params]), slots[0]):
        assert torch.equal(got, w)
    sync.stage(slots[1], adopt=[False, False])  # a reply that came inline: copied into spares
    sync.swap_in()
    before = [t.clone() for t in slots[0]]
    for t in slots[0]:
        t.fill_(7.0)  # the shard writes the slot the model just left
    for got, w in zip(layout.flatten([p.detach() for p in params]), slots[1]):
        assert torch.equal(got, w)  # the model holds the inline reply, untouched by the slot's new contents
    sync.stage([b * 2 for b in before], adopt=[False, False])
    sync.swap_in()  # the spares used now are the model's own memory, not slot 0
    assert all(torch.equal(t, torch.full_like(t, 7.0)) for t in slots[0])
    sync.stage(slots[1], adopt=[True, False])  # shard 0's reply in a slot, shard 1's inline
    sync.swap_in()
    kept = [t.clone() for t in slots[1]]
    sync.load([torch.zeros(n) for n in layout.shard_sizes])
    assert all(torch.equal(t, k) for t, k in zip(slots[1], kept))  # load wrote into no slot
    assert all(float(p.detach().abs().sum()) == 0 for p in params)
    assert all(p.data_ptr() != v.data_ptr() for p, v in zip(params, layout.whole_views(slots[1])) if v is not None)
