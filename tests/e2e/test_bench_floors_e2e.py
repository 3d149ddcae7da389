"""The comm bench's floor baselines do the work they stand for, each with its peer in a
process of its own: the raw ZeroMQ server and the shared-memory peer apply p -= lr * g
exactly and skip a non-finite gradient."""
import pytest
import torch

from psgd.bench.comm import RAW_SGD_LR, start_raw_server


@pytest.mark.timeout(60)
def test_raw_sgd_floor_applies_exactly_the_sgd_step_and_skips_non_finite():
    """The floor baseline must do the work it stands for: each round trip applies
    p -= lr * g to the server's parameters (a non-finite gradient is skipped)
    and replies with them, zero-copy."""
    numel = 32768  # 128 KiB: above pyzmq's copy threshold, so the reply is tracked zero-copy
    proc, raw = start_raw_server(numel * 4, sgd=True)
    try:
        grads = [torch.randn(numel), torch.full((numel,), float("nan")), torch.randn(numel)]
        expected = torch.zeros(numel)
        for g in grads * 3:
            reply = torch.frombuffer(bytearray(raw.round_trip(memoryview(g.numpy()).cast("B"))), dtype=torch.float32)
            if torch.isfinite(g).all():
                expected.add_(g, alpha=-RAW_SGD_LR)
            assert torch.equal(reply, expected)
        assert not torch.equal(expected, torch.zeros(numel))
    finally:
        raw.stop_server()
        raw.close()
        proc.join(timeout=10)
    assert proc.exitcode == 0


@pytest.mark.parametrize("wake", ["pipe", "zmq"])
def test_floor_peer_applies_the_step_in_its_own_process_and_gives_up_the_name(wake):
    from psgd.bench.raw_shm import ShmFloorPeer
    from psgd.wire.shm import segment as shm
    if not shm.available():
        pytest.skip("no sealable memfd here")
    peer = ShmFloorPeer(1000, lr=0.5, wake=wake)
    try:
        expect = torch.zeros(1000)
        for _ in range(3):
            g = torch.randn(1000)
            out = peer.round_trip(g)
            expect.add_(g, alpha=-0.5)
            assert torch.equal(out, expect)
        bad = torch.full((1000,), float("inf"))
        assert torch.equal(peer.round_trip(bad), expect)
        assert not peer._segment.linked  # only the two mappings hold the memory
    finally:
        peer.close()
