"""A worker that reports an absurd step time to shards under `staleness: auto`: real
shard loops on loopback sockets, driven by raw PUSH messages. Every shard sees the
same lie, so a lie that crashed the policy would stop them all at the same decision
clock (1e307 once overflowed the policy's median); the shards clamp it, keep
answering and agree on the widest bound."""
import sys

import pytest
import torch

from psgd.config import load_config
from psgd.core.staleness_policy import BoundLimits
from psgd.tasks import build_model, load_task
from psgd.wire import protocol as P
from psgd.wire.payload import tensor_frame
from psgd.wire.transport import ShardConnections

pytestmark = pytest.mark.e2e

WORKERS = 3
LIAR = 2
STALENESS_MAX = 6
CLOCKS = 3 * BoundLimits().window  # several decision clocks after the first full window


def ask(conns: ShardConnections, shard: int, frames: list) -> P.Record:
    conns.send(shard, frames)
    got = conns.recv(timeout_ms=5000)
    assert got, f"shard {shard} stopped answering"
    rec, _ = P.decode(got[0][1])
    assert not isinstance(rec, P.Error), rec
    return rec


@pytest.mark.timeout(60)
@pytest.mark.parametrize("lie", [1e307, sys.float_info.max])
def test_an_absurd_step_time_is_clamped_and_every_shard_keeps_serving(shards, lie):
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic", "cluster.servers=2",
                             f"cluster.workers={WORKERS}", "consistency.mode=ssp", "consistency.staleness=auto",
                             "consistency.staleness_min=0", f"consistency.staleness_max={STALENESS_MAX}"])
    cluster = shards(cfg, build_model(cfg, load_task(cfg)))
    conns = [ShardConnections(cluster.addresses) for _ in range(WORKERS)]  # one connection per rank
    try:
        for rank, c in enumerate(conns):
            for s in range(2):
                assert isinstance(ask(c, s, P.encode(P.Register(req=1, rank=rank,
                                                                fingerprint=cluster.layout.fingerprint))), P.Welcome)
        zeros = [tensor_frame(torch.zeros(n)) for n in cluster.layout.shard_sizes]
        for clock in range(CLOCKS):
            for rank, c in enumerate(conns):
                for s in range(2):
                    push = P.Push(req=2 + clock, rank=rank, seq=clock, clock=clock, numel=cluster.layout.shard_sizes[s],
                                  step_s=lie if rank == LIAR else 0.01)
                    ack = ask(c, s, P.encode(push, [zeros[s]]))
                    assert isinstance(ack, P.Ack) and ack.applied
        lives = [ask(conns[0], s, P.encode(P.Stats(req=10 ** 6))).stats["live"] for s in range(2)]
    finally:
        for c in conns:
            c.close()
    # The liar is the laggard by far, so the bound widens to its limit, on both shards alike.
    assert lives[0]["changes"] == lives[1]["changes"]
    assert lives[0]["changes"] and all(ch["origin"] == "auto" for ch in lives[0]["changes"])
    assert lives[0]["changes"][-1]["staleness"] == STALENESS_MAX
