"""A shard whose pushes come in runs (wire.compression.choose_by: tensor), driven in this
process through its request handler (its socket's sends captured): a push that does not
follow the shard's plan (runs, encodings, frames), or that carries a forged or non-finite
scale in one run, gets an error reply and leaves the shard exactly as it was; a client
with another plan is refused at registration; a resent push (same seq) applies once,
exactly the decoded gradient."""
import pytest
import torch

from psgd.config import load_config
from psgd.core.sharding import make_layout
from psgd.servers.shard import ShardServer
from psgd.wire import protocol as P
from psgd.wire.codecs import WireEncoder
from psgd.wire.codecs._blocks import max_scale
from psgd.wire.codecs.runs import RUNS, decode_runs, plan_fingerprint, push_plans

SHAPES = [("w1", (20, 10)), ("b1", (10,)), ("w2", (15, 10)), ("b2", (5,))]  # runs: int8 [0, 350), fp16 [350, 365)
COMPRESSION = "{default: int8, small: fp16, small_below: 100, choose_by: tensor}"


class Shard:
    """A ShardServer in this process; what it sends is decoded into `sent`."""

    def __init__(self):
        self.cfg = load_config(None, ["cluster.servers=1", "cluster.workers=1", "checkpoint.enabled=false",
                                      "wire.shared_memory=off", "optimizer.lr=0.5",
                                      f"wire.compression={COMPRESSION}"])
        self.layout = make_layout(SHAPES, 1)
        self.plan = push_plans(self.cfg.wire, self.layout, False)[0]
        self.start = torch.randn(self.layout.total, generator=torch.Generator().manual_seed(1))
        self.server = ShardServer(self.cfg, 0, "127.0.0.1:0", self.start.clone(), self.layout.fingerprint,
                                  push_plan=self.plan)
        self.sent = []
        self.server._sock.send = self.server._sock.send_tracked = lambda _, frames: self.sent.append(P.decode(frames))

    def ask(self, record, frames=()):
        self.server.handle(b"w0", P.encode(record, frames))
        return self.sent[-1][0]

    def close(self):
        self.server._sock.close()


@pytest.fixture
def shard():
    s = Shard()
    try:
        yield s
    finally:
        s.close()


def push(encoded, **over):
    fields = dict(rank=0, seq=1, clock=0, encoding=encoded.encoding, numel=365, runs=encoded.runs)
    return P.Push(**{**fields, **over})


def test_a_client_with_another_plan_is_refused_at_registration(shard):
    refused = shard.ask(P.Register(rank=0, fingerprint=shard.layout.fingerprint))  # a choose_by: shard client
    assert isinstance(refused, P.Error) and refused.code == "layout_mismatch" and "runs" in refused.reason
    welcome = shard.ask(P.Register(rank=0, fingerprint=plan_fingerprint(shard.layout.fingerprint, shard.plan)))
    assert isinstance(welcome, P.Welcome)


def test_pushes_off_the_plan_or_with_a_forged_scale_are_refused_and_leave_the_shard_untouched(shard):
    shard.ask(P.Register(rank=0, fingerprint=plan_fingerprint(shard.layout.fingerprint, shard.plan)))
    grad = torch.randn(365, generator=torch.Generator().manual_seed(2))
    good = WireEncoder.from_plans([shard.plan]).encode(0, grad)
    codes, scales, half = (bytes(f) for f in good.frames)  # int8 run: codes, block scales; fp16 run: values
    (int8_run, f16_run) = good.runs

    def block_scales(value):
        forged = torch.frombuffer(bytearray(scales), dtype=torch.float32).clone()
        forged[-1] = value
        return bytes(memoryview(forged.numpy()).cast("B"))

    hostile = {
        "one run announced": (push(good, runs=[int8_run]), [codes, scales], "bad_frames"),
        "runs swapped": (push(good, runs=[f16_run, int8_run]), [half, codes, scales], "bad_field"),
        "a run's encoding changed": (push(good, runs=[int8_run, ["none", 1.0, 0]]), [codes, scales, half], "bad_field"),
        "a frame missing": (push(good), [codes, scales], "bad_frames"),
        "short code frame": (push(good), [codes[:-1], scales, half], "bad_size"),
        "long fp16 frame": (push(good), [codes, scales, half + bytes(2)], "bad_size"),
        "nan block scale": (push(good), [codes, block_scales(float("nan")), half], "bad_value"),
        "block scale past the cap": (push(good), [codes, block_scales(float(max_scale(8)) * 2), half], "bad_value"),
        "inf run scale": (push(good, runs=[int8_run, ["fp16", float("inf"), 0]]), [codes, scales, half], "bad_value"),
        "nan run scale": (push(good, runs=[int8_run, ["fp16", float("nan"), 0]]), [codes, scales, half], "bad_value"),
        "int8 header scale": (push(good, runs=[["int8", 2.0, 0], f16_run]), [codes, scales, half], "bad_field"),
        "one encoding for the shard": (push(good, encoding="int8", runs=[]), [codes, scales], "bad_encoding"),
        "runs in shared memory": (push(good, shm=1), [], "bad_encoding"),
        "a run that is not a list": (push(good, runs=[int8_run, "fp16"]), [codes, scales, half], "bad_field"),
    }
    for what, (record, frames, code) in hostile.items():
        reply = shard.ask(record, frames)
        assert isinstance(reply, P.Error) and reply.code == code, (what, reply)
    state = shard.server.state
    assert torch.equal(state.params, shard.start) and state.version == 0  # nothing reached the parameters
    assert state.counters["pushes"] == 0 and state.counters["bad_requests"] == len(hostile)

    first = shard.ask(push(good), good.frames)
    again = shard.ask(push(good), good.frames)  # a resend: the same seq
    assert isinstance(first, P.Ack) and first.applied and first.version == 1
    assert isinstance(again, P.Ack) and again.version == 1 and state.counters["duplicates"] == 1
    sent = decode_runs(shard.plan, good.runs, good.frames, torch.empty(365))
    assert good.encoding == RUNS
    assert torch.equal(state.params, shard.start - 0.5 * sent)  # applied once, exactly the decoded gradient
