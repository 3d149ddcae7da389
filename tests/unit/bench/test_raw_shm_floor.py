"""The shared-memory floor does the work it claims: SGD applied exactly, a
non-finite gradient skipped, and the returned parameters read back from the
reply region."""
from __future__ import annotations

import pytest
import torch

from psgd.bench.raw_shm import ShmSgdFloor, time_shm_floor


def test_floor_applies_exactly_the_sgd_step_and_returns_the_parameters():
    floor = ShmSgdFloor(1000, lr=0.5)
    try:
        expect = torch.zeros(1000)
        for _ in range(3):
            g = torch.randn(1000)
            out = floor.round_trip(g)
            expect.add_(g, alpha=-0.5)
            assert torch.equal(floor.params, expect)
            assert torch.equal(out, expect) and out.data_ptr() != floor.params.data_ptr()
    finally:
        floor.close()


def test_floor_skips_a_non_finite_gradient_with_the_parameters_untouched():
    floor = ShmSgdFloor(100, lr=0.5)
    try:
        floor.round_trip(torch.ones(100))
        before = floor.params.clone()
        bad = torch.ones(100)
        bad[37] = float("nan")
        out = floor.round_trip(bad)
        assert floor.skipped == 1
        assert torch.equal(floor.params, before) and torch.equal(out, before)
    finally:
        floor.close()


def test_time_shm_floor_returns_one_time_per_repeat():
    times = time_shm_floor(256, warmup=2, repeats=5)
    assert len(times) == 5 and all(t > 0 for t in times)


def test_floor_peer_refuses_an_unknown_wake_channel():
    from psgd.bench.raw_shm import ShmFloorPeer
    with pytest.raises(ValueError, match="wake"):
        ShmFloorPeer(10, wake="signal")
