"""Parameter layout: identity round trip, byte balance, fingerprints."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from psgd.core.sharding import layout_for_module, make_layout
from psgd.tasks import SmallCNN


def random_tensors(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def test_many_medium_tensors_stay_balanced():
    shapes = [(333,), (333,), (334,)]
    layout = make_layout([(f"p{i}", s) for i, s in enumerate(shapes)], 2)
    assert sorted(layout.shard_sizes) == [500, 500]


def test_fingerprint_is_deterministic_and_layout_specific():
    model = SmallCNN(64, 10)
    a, b = layout_for_module(model, 2), layout_for_module(SmallCNN(64, 10), 2)
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != layout_for_module(model, 3).fingerprint
    assert a.fingerprint != layout_for_module(SmallCNN(64, 10, channels=8), 2).fingerprint


def test_flatten_reuses_output_buffers():
    shapes = [(5, 4), (7,)]
    layout = make_layout([("a", shapes[0]), ("b", shapes[1])], 2)
    out = [torch.empty(n) for n in layout.shard_sizes]
    ptrs = [t.data_ptr() for t in out]
    res = layout.flatten(random_tensors(shapes), out=out)
    assert [t.data_ptr() for t in res] == ptrs


def test_flatten_then_unflatten_is_identity():
    shapes = [(64, 32), (32,), (10, 32), (10,), (3, 3, 3, 3)]
    for shards in (1, 2, 3, 4, 7):
        layout = make_layout([(f"p{i}", s) for i, s in enumerate(shapes)], shards)
        tensors = random_tensors(shapes)
        flat = layout.flatten(tensors)
        assert [t.numel() for t in flat] == list(layout.shard_sizes)
        out = [torch.zeros_like(t) for t in tensors]
        layout.unflatten(flat, out)
        for a, b in zip(tensors, out):
            assert torch.equal(a, b)


def test_one_dominant_tensor_is_split_evenly():
    shapes = [(1000, 1000), (1000,), (10, 1000), (10,)]
    total = sum(torch.Size(s).numel() for s in shapes)
    for shards in (2, 3, 4, 8):
        layout = make_layout([(f"p{i}", s) for i, s in enumerate(shapes)], shards)
        even = total / shards
        assert sum(layout.shard_sizes) == total
        assert max(layout.shard_sizes) <= even * 1.05
        # every element of every tensor is placed exactly once
        covered = [torch.zeros(torch.Size(s).numel(), dtype=torch.int32) for s in shapes]
        for segs in layout.segments:
            for seg in segs:
                covered[seg.param][seg.param_offset:seg.param_offset + seg.length] += 1
        assert all(bool((c == 1).all()) for c in covered)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=12), shards=st.integers(1, 9))
def test_any_model_places_every_element_once_within_one_element_of_the_even_share(sizes, shards):
    layout = make_layout([(f"p{i}", (n,)) for i, n in enumerate(sizes)], shards)
    total = sum(sizes)
    assert sum(layout.shard_sizes) == total
    assert max(layout.shard_sizes) <= -(-total // shards)  # ceil(total / S): never over the even share
    tensors = [torch.arange(n, dtype=torch.float32) + 10_000 * i for i, n in enumerate(sizes)]
    out = [torch.zeros(n) for n in sizes]
    layout.unflatten(layout.flatten(tensors), out)
    assert all(torch.equal(x, y) for x, y in zip(tensors, out))
