"""The simulator's shared model reads a worker's flat parameters in place and
writes gradients straight into the flat buffers a push carries: the same bits
as copying them in and out (workers/model_sync.py), and nothing it must not touch."""
import torch
from sgd_reference import cfg_for

from psgd.core.sharding import layout_for_module
from psgd.sim.binding import ModelBinding
from psgd.sim.executor import Executor
from psgd.tasks import build_model, load_task
from psgd.workers.model_sync import ModelSync


def _grads_by_copy(model, task, layout, flats, x, y):
    sync = ModelSync(model, layout, torch.device("cpu"), pin_memory=False)
    sync.load(flats)
    model.zero_grad(set_to_none=False)
    task.loss(model(x), y).backward()
    return [g.clone() for g in sync.gradients()]


def test_bound_gradients_are_the_copied_ones_bit_for_bit_and_the_shards_stay_untouched():
    cfg = cfg_for("asp", 1)
    task = load_task(cfg)
    model = build_model(cfg, task)
    layout = layout_for_module(model, 2)
    assert any(len({s for s, segs in enumerate(layout.segments) for g in segs if g.param == p}) == 2
               for p in range(len(layout.names)))  # a tensor split over both shards: the copied path too
    params = [p for p in model.parameters() if p.requires_grad]
    binding = ModelBinding(params, layout)
    own = [p.data.data_ptr() for p in params]
    gen = torch.Generator().manual_seed(0)
    for step in range(3):
        flats = [torch.randn(n, generator=gen) for n in layout.shard_sizes]
        before = [f.clone() for f in flats]
        x, y = task.x_train[step * 16:(step + 1) * 16], task.y_train[step * 16:(step + 1) * 16]
        grads = [torch.zeros(n) for n in layout.shard_sizes]
        binding.bind(flats)
        binding.bind_grads(grads)
        task.loss(model(x), y).backward()
        binding.gather_split(grads)
        assert all(torch.equal(a, b) for a, b in zip(flats, before))
        binding.unbind()
        assert [p.data.data_ptr() for p in params] == own
        expected = _grads_by_copy(model, task, layout, flats, x, y)
        assert all(torch.equal(g, e) for g, e in zip(grads, expected))
        assert all(torch.equal(a, b) for a, b in zip(flats, before))


def test_workers_at_one_version_share_one_tensor_and_the_shard_copies_only_for_an_unread_reply():
    ex = Executor(cfg_for("asp", 3))
    assert all(w.params[s] is ex.shards[s].params for w in ex.workers for s in range(2))  # one copy, no clone
    pushes = ex.compute(0)  # worker 0 steps on the shared parameters
    for p in pushes:
        ex.serve_push(p)
    # Workers 1 and 2 had not stepped on version 0: the update went to a copy.
    assert [s.counters["copy_on_write"] for s in ex.shards] == [1, 1]
    assert all(ex.workers[1].params[s] is ex.workers[2].params[s] is not ex.shards[s].params for s in range(2))
    replies = [ex.try_answer(s, 0) for s in range(2)]
    assert ex.receive(replies[0]) is False and ex.receive(replies[1]) is True
    assert all(ex.workers[0].params[s] is ex.shards[s].params for s in range(2))
    for rank in (0, 1, 2):  # everyone steps: nothing is left unread
        for p in ex.compute(rank):
            ex.serve_push(p)
    # Worker 0's pushes found only workers 1 and 2's (already stepped) reads: no copy.
    assert [s.counters["copy_on_write"] for s in ex.shards] == [1, 1]


def test_a_split_tensor_is_assembled_where_the_versions_live():
    # On an H200 the batched path failed: a tensor split over two shards was assembled on the
    # CPU while the versions were on cuda. The meta device stands in for cuda here.
    cfg = cfg_for("asp", 1)
    model = build_model(cfg, load_task(cfg))
    layout = layout_for_module(model, 2)
    binding = ModelBinding([p for p in model.parameters() if p.requires_grad], layout)
    assert binding._split  # the case at hand
    tensors = binding.tensors([torch.empty(n, device="meta") for n in layout.shard_sizes])
    assert {t.device.type for t in tensors} == {"meta"}
