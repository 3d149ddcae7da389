"""Load with injected duplicates: 64 light clients x 200 pushes against 2 live
shards. Some pushes are sent twice at once, some are resent after their ack
(a lost reply); every shard must apply each distinct push exactly once."""
import random
import time

import pytest
import torch
from conftest import InProcessShards

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.tasks import build_model, load_task
from psgd.wire import protocol as P
from psgd.wire.payload import tensor_frame
from psgd.wire.transport import ShardConnections

CLIENTS = 64


PUSHES = 200  # 12,800 distinct pushes a shard, ~900 of them duplicated: the load, in 2/5 of the time of 500


LR = 0.5


GRAD = 2.0 ** -10  # lr * grad = 2^-11: every partial sum is exact in float32


def collect(conns, expected):
    """Receive `expected` replies in total across all clients' sockets."""
    replies = []
    idle = 0
    while len(replies) < expected:
        got = 0
        for c in conns:
            for shard, frames in c.recv(timeout_ms=0):
                replies.append((shard, P.decode(frames)[0]))
                got += 1
        idle = 0 if got else idle + 1
        if not got:
            time.sleep(0.0002)  # let the shard threads have the GIL
        if idle > 50000:
            raise AssertionError(f"only {len(replies)} of {expected} replies arrived")
    return replies


@pytest.mark.timeout(120)
def test_64_clients_200_pushes_with_duplicates_apply_exactly_once():
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic", "cluster.servers=2",
                             f"cluster.workers={CLIENTS}", "consistency.mode=asp", f"optimizer.lr={LR}"])
    layout = layout_for_module(build_model(cfg, load_task(cfg)), 2)
    cluster = InProcessShards(cfg, [torch.zeros(n) for n in layout.shard_sizes], layout.fingerprint)
    conns = [ShardConnections(cluster.addresses) for _ in range(CLIENTS)]
    rng = random.Random(6)
    try:
        for rank, c in enumerate(conns):
            for s in range(2):
                c.send(s, P.encode(P.Register(req=1, rank=rank, fingerprint=layout.fingerprint)))
        assert all(isinstance(r, P.Welcome) for _, r in collect(conns, 2 * CLIENTS))
        grads = [torch.full((n,), GRAD) for n in layout.shard_sizes]
        injected = [0, 0]
        applied_acks = [0, 0]
        retry_later: list[tuple[int, int, list]] = []
        for seq in range(PUSHES + 1):
            sent = 0
            for rank, s, frames in retry_later:  # the previous round's acks have all arrived
                conns[rank].send(s, frames)
                injected[s] += 1
                sent += 1
            retry_later = []
            for rank, c in enumerate(conns if seq < PUSHES else []):
                for s in range(2):
                    frames = P.encode(P.Push(req=seq + 2, rank=rank, seq=seq, clock=seq, read_version=0,
                                             numel=layout.shard_sizes[s]), [tensor_frame(grads[s])])
                    c.send(s, frames)
                    sent += 1
                    if rng.random() < 0.05:  # sent twice back to back (a client resending too early)
                        c.send(s, frames)
                        injected[s] += 1
                        sent += 1
                    if rng.random() < 0.02:  # resent after its ack (the ack was lost)
                        retry_later.append((rank, s, frames))
            for s, ack in collect(conns, sent):
                assert isinstance(ack, P.Ack), ack
                applied_acks[s] += ack.applied
        for s, server in enumerate(cluster.servers):
            state = server.state
            assert state.version == CLIENTS * PUSHES  # applied = distinct pushes
            assert state.counters["pushes"] == CLIENTS * PUSHES
            assert state.counters["duplicates"] == injected[s] > 0
            assert applied_acks[s] == CLIENTS * PUSHES
            assert state.last_seq == [PUSHES - 1] * CLIENTS
            # The parameters moved by exactly one step per distinct push.
            assert torch.equal(state.params, torch.full_like(state.params, -CLIENTS * PUSHES * LR * GRAD))
    finally:
        for c in conns:
            c.close()
        cluster.close()
