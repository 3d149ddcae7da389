"""The PS client against real shard loops on loopback: exact update arithmetic,
exactly-once resends, error replies that leave state untouched."""
import pytest
import torch

from psgd.config import load_config
from psgd.tasks import build_model, load_task
from psgd.wire import protocol as P
from psgd.wire.payload import tensor_frame
from psgd.workers.client import PSClient, RemoteError


def synthetic_cfg(**over):
    sets = ["task.model=linear", "task.dataset=synthetic", "cluster.servers=2", "cluster.workers=1",
            "consistency.mode=asp"] + [f"{k}={v}" for k, v in over.items()]
    return load_config(None, sets)


def connect(shards, **over):
    """Two in-process shards serving the synthetic linear model, and a registered
    client; returns (cluster, client, parameters at registration)."""
    cfg = synthetic_cfg(**over)
    cluster = shards(cfg, build_model(cfg, load_task(cfg)))
    client = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None)
    return cluster, client, [t.clone() for t in client.register()]


def test_n_pushes_move_parameters_by_n_lr_v(shards):
    cluster, client, start = connect(shards, **{"optimizer.lr": 0.5})
    grads = [torch.full((n,), 0.25) for n in cluster.layout.shard_sizes]
    for _ in range(50):
        out = client.push_pull(grads)
    for s, t in enumerate(out):
        torch.testing.assert_close(t, start[s] - 50 * 0.5 * 0.25, rtol=0, atol=1e-5)
    assert client.clock == 50
    client.close()


def test_resent_push_is_applied_once(shards):
    cluster, client, start = connect(shards, **{"optimizer.lr": 1.0})
    grads = [torch.ones(n) for n in cluster.layout.shard_sizes]
    client.push(grads)
    client.seq -= 1  # resend the same (rank, seq), as a retry after a lost reply would
    client.clock -= 1
    acks = client.push(grads)
    assert [a.applied for a in acks] == [False, False]
    out = client.pull()
    for s, t in enumerate(out):
        torch.testing.assert_close(t, start[s] - 1.0)
    stats = client.stats()
    assert all(st["counters"]["duplicates"] == 1 and st["version"] == 1 for st in stats)
    client.close()


def test_bad_requests_get_errors_and_leave_state_untouched(shards):
    from psgd.wire.transport import ShardConnections
    cluster, client, before = connect(shards, **{"cluster.workers": 2})  # rank 1: the second connection
    stranger = ShardConnections(cluster.addresses[:1])
    stranger.send(0, P.encode(P.Pull(req=1, rank=0)))
    [(_, reply)] = stranger.recv(timeout_ms=5000)
    assert P.decode(reply)[0].code == "not_registered"
    stranger.close()
    conns = ShardConnections(cluster.addresses[:1])
    conns.send(0, P.encode(P.Register(req=1, rank=1, fingerprint=cluster.layout.fingerprint)))
    assert isinstance(P.decode(conns.recv(timeout_ms=5000)[0][1])[0], P.Welcome)
    n = cluster.layout.shard_sizes[0]
    bad = [
        [b"not msgpack at all"],
        P.encode(P.Push(req=1, rank=1, seq=100, clock=0, numel=n), [tensor_frame(torch.ones(n - 1))]),
        P.encode(P.Push(req=2, rank=1, seq=101, clock=0, numel=n + 1), [tensor_frame(torch.ones(n + 1))]),
        P.encode(P.Push(req=3, rank=1, seq=102, clock=0, numel=n, encoding="f64"), [tensor_frame(torch.ones(n))]),
        P.encode(P.Pull(req=4, rank=0)),  # not the rank this connection registered as
        P.encode(P.Push(req=7, rank=1, seq=103, clock=0, numel=n), [tensor_frame(torch.ones(n))] * 2),
        P.encode(P.Push(req=8, rank=1, seq=104, clock=0, numel=n, scale=-1.0), [tensor_frame(torch.ones(n))]),
        P.encode(P.PushPull(req=9, rank=1, seq=105, clock=0, numel=n, slot=2), [tensor_frame(torch.ones(n))]),
        P.encode(P.Pull(req=10, rank=1, slot=-1)),
        P.encode(P.Register(req=5, rank=0, fingerprint="wrong")),
        P.encode(P.Params(req=6)),
    ]
    codes = []
    for frames in bad:
        conns.send(0, frames)
        [(shard, reply)] = conns.recv(timeout_ms=5000)
        rec, _ = P.decode(reply)
        assert isinstance(rec, P.Error)
        codes.append(rec.code)
    assert codes == ["bad_header", "bad_size", "bad_size", "bad_encoding", "bad_rank", "bad_frames",
                     "bad_field", "bad_field", "bad_field", "layout_mismatch", "not_a_request"]
    after = client.pull()
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert client.stats()[0]["counters"]["bad_requests"] == len(bad) + 1
    conns.close()
    client.close()


def test_non_finite_gradient_is_rejected_and_counted(shards):
    cluster, client, before = connect(shards)
    grads = [torch.ones(n) for n in cluster.layout.shard_sizes]
    grads[0][0] = float("nan")
    grads[1][-1] = float("inf")
    acks = client.push(grads)
    assert not any(a.applied for a in acks)
    assert all(torch.equal(a, b) for a, b in zip(before, client.pull()))
    assert [s["counters"]["rejected_nonfinite"] for s in client.stats()] == [1, 1]
    client.close()


def test_layout_mismatch_is_a_clear_error(shards):
    cfg = synthetic_cfg()
    model = build_model(cfg, load_task(cfg))
    cluster = shards(cfg, model)
    other = build_model(load_config(None, ["task.model=mlp", "task.dataset=synthetic"]), load_task(cfg))
    from psgd.core.sharding import layout_for_module
    client = PSClient(cluster.addresses, layout_for_module(other, 2), rank=0, heartbeat_s=None)
    with pytest.raises(RemoteError, match="layout_mismatch"):
        client.register()
    client.close()
