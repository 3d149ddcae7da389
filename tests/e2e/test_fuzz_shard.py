"""Hostile input at a live shard: 10,000 malformed or random messages (seeded
generator, every wire encoding: none, fp16, bf16, top-k) interleaved with a real
client's training pushes. Every bad message
gets an ERROR reply and is counted, the real client is still served, and the
parameters stay bit-identical to a control shard that saw only the real pushes.
Also: a message above the size limit is refused at the socket."""
import random
import struct
import time

import msgpack
import pytest
import torch
from conftest import InProcessShards

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.tasks import build_model, load_task
from psgd.wire import protocol as P
from psgd.wire.transport import ShardConnections
from psgd.workers.client import PSClient

BAD_MESSAGES = 10_000


WORKER = 0   # the real client's rank


FUZZER = 1   # rank the fuzzing connection registers as


def head(mtype, fields, version=P.PROTOCOL_VERSION, req=7):
    return msgpack.packb([version, mtype, req, fields], use_bin_type=True)


class BadMessages:
    """Seeded generator of messages a shard must refuse. Returns (registered?, frames):
    which connection sends it (the one registered as FUZZER, or an unregistered one)."""

    def __init__(self, seed, numel, fingerprint):
        self.rng = random.Random(seed)
        self.numel = numel
        self.fp = fingerprint
        self.kinds = [getattr(self, n) for n in dir(self) if n.startswith("k_")]

    def __call__(self):
        return self.rng.choice(self.kinds)()

    def _bytes(self, n):
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    def _grad(self, n=None, itemsize=4):
        return self._bytes(((self.numel if n is None else n) * itemsize))

    def _push(self, **over):
        fields = dict(rank=FUZZER, seq=10**6, clock=0, read_version=0, encoding="none", scale=1.0, numel=self.numel)
        fields.update(over)
        return fields

    def k_random_bytes(self):
        while True:
            frames = [self._bytes(self.rng.randrange(0, 300))] + [self._bytes(9)] * self.rng.randrange(0, 3)
            try:
                P.decode(frames)
            except P.ProtocolError:
                return self.rng.random() < 0.5, frames

    def k_truncated_header(self):
        full = head(P.MsgType.PUSH, self._push())
        return True, [full[: self.rng.randrange(0, len(full))], self._grad()]

    def k_bad_version(self):
        return True, [head(P.MsgType.PULL, {"rank": FUZZER}, version=self.rng.choice([0, 2, 99, "1", None]))]

    def k_bad_type(self):
        return True, [head(self.rng.choice([0, 16, 255, -1, "PUSH", 1.5, True, None]), {})]

    def k_bad_request_id(self):
        return True, [head(P.MsgType.PULL, {"rank": FUZZER}, req=self.rng.choice([-1, 2**63, "x", 1.0, None]))]

    def k_bad_shape(self):
        obj = self.rng.choice([[1, 3, 7], [1, 3, 7, {}, 5], {"a": 1}, 42, "x", [1, 3, 7, [1, 2]]])
        return True, [msgpack.packb(obj)]

    def k_unknown_field(self):
        return True, [head(P.MsgType.PUSH, self._push(evil=1)), self._grad()]

    def k_wrong_field_type(self):
        key, value = self.rng.choice([("rank", "1"), ("seq", 1.5), ("numel", True), ("scale", "big"),
                                      ("encoding", 3), ("clock", None), ("read_version", [0])])
        return True, [head(P.MsgType.PUSH, self._push(**{key: value})), self._grad()]

    def k_bad_step_time(self):
        return True, [head(P.MsgType.PUSH, self._push(step_s=self.rng.choice([-1.0, float("inf"), float("nan")]))),
                      self._grad()]

    def k_control_without_the_token(self):
        op = self.rng.choice(["show", "prepare", "commit", "abort", "x"])
        return self.rng.random() < 0.5, [head(P.MsgType.CONTROL, {"op": op, "token": self._bytes(4).hex(),
                                                                  "settings": {"consistency.staleness": "0"}})]

    def k_reply_type(self):
        mtype = self.rng.choice([P.MsgType.WELCOME, P.MsgType.PARAMS, P.MsgType.ACK, P.MsgType.STATS_REPLY,
                                 P.MsgType.CONTROL_REPLY, P.MsgType.ERROR])
        return True, [head(mtype, {})]

    def k_push_wrong_numel(self):
        n = self.numel + self.rng.choice([-1, 1, 1000, -self.numel])
        return True, [head(P.MsgType.PUSH, self._push(numel=n)), self._grad(n)]

    def k_push_wrong_bytes(self):
        extra = self.rng.choice([-4, -1, 1, 3, 4, 400])
        return True, [head(P.MsgType.PUSH_PULL, self._push()), self._bytes(self.numel * 4 + extra)]

    def k_push_bad_dtype(self):
        enc = self.rng.choice(["f64", "int8", "", "F32", "f32", "pickle"])  # f32: the word before "none"
        return True, [head(P.MsgType.PUSH, self._push(encoding=enc)), self._grad()]

    def k_push_frame_count(self):
        return True, [head(P.MsgType.PUSH, self._push())] + [self._grad()] * self.rng.choice([0, 2, 3])

    def k_push_impossible_values(self):
        over = self.rng.choice([{"read_version": 10**9}, {"seq": -1}, {"clock": -5}, {"read_version": -1},
                                {"scale": 0.0}, {"scale": -1.0}, {"scale": float("inf")}, {"scale": float("nan")}])
        return True, [head(P.MsgType.PUSH, self._push(**over)), self._grad()]

    def k_push_impersonation(self):
        return True, [head(P.MsgType.PUSH, self._push(rank=self.rng.choice([WORKER, 5, -1]))), self._grad()]

    def k_push_unregistered(self):
        return False, [head(P.MsgType.PUSH_PULL, self._push()), self._grad()]

    def k_pull_bad(self):
        if self.rng.random() < 0.5:
            return False, [head(P.MsgType.PULL, {"rank": FUZZER, "clock": 0})]
        return True, [head(P.MsgType.PULL, {"rank": FUZZER}), self._bytes(4)]

    def k_register_bad(self):
        fields = self.rng.choice([{"rank": 0, "role": "worker", "fingerprint": "not-the-layout"},
                                  {"rank": 99, "role": "worker", "fingerprint": self.fp},
                                  {"rank": -1, "role": "worker", "fingerprint": self.fp},
                                  {"rank": 0, "role": "admin", "fingerprint": self.fp}])
        return False, [head(P.MsgType.REGISTER, fields)]

    def k_heartbeat_bad(self):
        if self.rng.random() < 0.5:
            return True, [head(P.MsgType.HEARTBEAT, {"rank": self.rng.choice([2, 99, -3])})]
        return True, [head(P.MsgType.HEARTBEAT, {"rank": FUZZER}), self._bytes(2)]

    def k_control_bad(self):
        if self.rng.random() < 0.5:
            return False, [head(P.MsgType.SHUTDOWN, {})]  # strangers may not stop a shard
        return True, [head(P.MsgType.STATS, {}), self._bytes(1)]

    def k_leave_other_rank(self):
        return True, [head(P.MsgType.LEAVE, {"rank": WORKER})]

    def k_push_half_bad(self):  # the scaled 16-bit encodings
        enc = self.rng.choice(["fp16", "bf16"])
        if self.rng.random() < 0.5:
            return True, [head(P.MsgType.PUSH, self._push(encoding=enc)), self._grad(itemsize=4)]
        return True, [head(P.MsgType.PUSH_PULL, self._push(encoding=enc, scale=self.rng.choice([0.0, -2.0]))),
                      self._grad(itemsize=2)]

    def k_push_sparse_bad(self):  # top-k: an index frame and a value frame
        n = self.numel
        nnz = self.rng.randrange(1, 6)
        kind = self.rng.choice(["index_out_of_range", "nnz_mismatch", "nnz_too_big", "one_frame", "negative"])
        idx = [self.rng.randrange(n) for _ in range(nnz)]
        if kind == "index_out_of_range":
            idx[0] = self.rng.choice([n, n + 7, -1, 2**31 - 1])
        if kind == "nnz_too_big":
            nnz = n + 1
        if kind == "negative":
            nnz = -nnz
        fields = self._push(encoding="topk", nnz=nnz if kind != "nnz_mismatch" else nnz + 1)
        frames = [struct.pack(f"<{len(idx)}i", *idx), struct.pack(f"<{len(idx)}f", *[1.0] * len(idx))]
        return True, [head(P.MsgType.PUSH, fields)] + frames[: 1 if kind == "one_frame" else 2]

    def k_absurd_seq_or_clock(self):
        over = self.rng.choice([{"seq": 2**63}, {"seq": 2**40}, {"clock": 10**12}, {"clock": 2**21}])
        return True, [head(P.MsgType.PUSH, self._push(**over)), self._grad()]

    def k_huge_header(self):
        return True, [head(P.MsgType.PULL, {"rank": FUZZER, "pad": "x" * (P.MAX_HEADER_BYTES + 1)})]


def drain(conn, want, timeout=60.0):
    records = []
    deadline = time.monotonic() + timeout
    while len(records) < want and time.monotonic() < deadline:
        for _, frames in conn.recv(timeout_ms=50):
            records.append(P.decode(frames)[0])
    return records


def setup(cfg):
    model = build_model(cfg, load_task(cfg))
    layout = layout_for_module(model, 1)
    init = layout.flatten([p.detach() for p in model.parameters()])
    return layout, init


def small_cfg(*extra):
    return load_config(None, ["cluster.servers=1", "cluster.workers=2", "consistency.mode=asp",
                              "optimizer.name=adam", "optimizer.lr=0.01", *extra])


@pytest.mark.timeout(120)
def test_10k_bad_messages_are_refused_counted_and_change_nothing():
    cfg = small_cfg()
    layout, init = setup(cfg)
    fuzzed = InProcessShards(cfg, init, layout.fingerprint)
    control = InProcessShards(cfg, init, layout.fingerprint)
    clients = [PSClient(c.addresses, layout, rank=WORKER, heartbeat_s=None, request_timeout_s=30)
               for c in (fuzzed, control)]
    registered = ShardConnections(fuzzed.addresses)
    stranger = ShardConnections(fuzzed.addresses)
    twin = ShardConnections(control.addresses)  # the control's member FUZZER, so membership matches
    gen = BadMessages(seed=6, numel=layout.shard_sizes[0], fingerprint=layout.fingerprint)
    grads = torch.Generator().manual_seed(0)
    try:
        for conn in (registered, twin):
            conn.send(0, P.encode(P.Register(req=1, rank=FUZZER, fingerprint=layout.fingerprint)))
            assert isinstance(drain(conn, 1)[0], P.Welcome)
        for c in clients:
            c.register()
        sent = {True: 0, False: 0}
        unread = {True: 0, False: 0}
        replies = []
        real_steps = 0
        for i in range(BAD_MESSAGES):
            is_registered, frames = gen()
            conn = registered if is_registered else stranger
            conn.send(0, frames)
            sent[is_registered] += 1
            unread[is_registered] += 1
            if unread[is_registered] == 4:  # a fuzzer that reads its replies (one that does not is cut off)
                replies += drain(conn, 4)
                unread[is_registered] = 0
            if i % 200 == 0:  # the real client keeps training on both shards alike
                g = [torch.randn(n, generator=grads) for n in layout.shard_sizes]
                out = [c.push_pull(g)[0].clone() for c in clients]
                assert torch.equal(out[0], out[1])
                real_steps += 1
        replies += drain(registered, unread[True]) + drain(stranger, unread[False])
        assert len(replies) == BAD_MESSAGES
        assert all(isinstance(r, P.Error) for r in replies)
        stats = clients[0].stats()[0]
        assert stats["counters"]["bad_requests"] == BAD_MESSAGES
        assert len({r.code for r in replies}) >= 8  # many distinct refusal reasons were exercised
        assert stats["version"] == real_steps == clients[1].stats()[0]["version"]
        f, c = fuzzed.servers[0].state, control.servers[0].state
        assert torch.equal(f.params, c.params)
        assert all(torch.equal(f.rule.state[k], c.rule.state[k]) for k in f.rule.state)
        assert f.last_seq == c.last_seq and f.board.clocks == c.board.clocks
    finally:
        for c in clients:
            c.close()
        for conn in (registered, stranger, twin):
            conn.close()
        fuzzed.close()
        control.close()


@pytest.mark.timeout(60)
def test_message_above_size_limit_is_dropped_at_the_socket():
    cfg = small_cfg("wire.max_message_mb=1")
    layout, init = setup(cfg)
    shard = InProcessShards(cfg, init, layout.fingerprint)
    big = ShardConnections(shard.addresses)
    client = PSClient(shard.addresses, layout, rank=WORKER, heartbeat_s=None, request_timeout_s=30)
    try:
        big.send(0, [head(P.MsgType.PULL, {"rank": FUZZER}), bytes(2 << 20)])
        assert drain(big, 1, timeout=1.0) == []  # never reaches the shard, so nothing answers
        client.register()
        client.push([torch.ones(layout.shard_sizes[0])])  # the shard still serves everyone else
        assert client.stats()[0]["version"] == 1
        assert client.stats()[0]["counters"].get("bad_requests", 0) == 0
    finally:
        client.close()
        big.close()
        shard.close()
