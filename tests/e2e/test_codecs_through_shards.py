"""Wire compression: exact byte counts, top-k error feedback, and the server's
sparse update touching exactly the chosen coordinates."""
import pytest
import torch

from psgd.config import load_config
from psgd.core.sharding import make_layout
from psgd.wire import protocol as P
from psgd.wire.codecs import topk_count
from psgd.wire.payload import tensor_frame
from psgd.workers.client import PSClient


def _cfg(**over):
    sets = ["task.model=linear", "task.dataset=synthetic", "cluster.servers=1", "cluster.workers=1",
            "consistency.mode=asp"] + [f"{k}={v}" for k, v in over.items()]
    return load_config(None, sets)


def test_server_topk_push_moves_exactly_the_chosen_coordinates(shards):
    cfg = _cfg(**{"optimizer.lr": 0.5})
    model = torch.nn.Linear(40, 10)
    cluster = shards(cfg, model)
    n = cluster.layout.shard_sizes[0]
    client = PSClient(cluster.addresses, cluster.layout, heartbeat_s=None, encoding="topk", topk_ratio=0.02)
    before = client.register()[0].clone()
    k = topk_count(n, 0.02)
    grad = torch.full((n,), 0.125)        # small everywhere ...
    chosen = torch.randperm(n)[:k]
    grad[chosen] = torch.arange(1, k + 1, dtype=torch.float32) * 4.0  # ... except k coordinates
    after = client.push_pull([grad])[0]
    moved = (after != before).nonzero().flatten()
    assert sorted(moved.tolist()) == sorted(chosen.tolist())
    assert torch.equal(after[chosen], before[chosen] - 0.5 * grad[chosen])
    assert client.bytes_sent == 8 * k
    # The chosen coordinates went out in full; everything else waits in the residual.
    assert torch.equal(client.encoder.codec.residuals[0], torch.where(after != before, 0.0, grad))
    client.close()


@pytest.mark.parametrize("frames,nnz,code", [
    ([torch.tensor([0, 100], dtype=torch.int32), torch.tensor([1.0, 1.0])], 2, "bad_index"),
    ([torch.tensor([0, -1], dtype=torch.int32), torch.tensor([1.0, 1.0])], 2, "bad_index"),
    ([torch.tensor([0, 1], dtype=torch.int32), torch.tensor([1.0, 1.0])], 3, "bad_size"),
    ([torch.tensor([0, 1], dtype=torch.int32)], 2, "bad_frames"),
])
def test_bad_sparse_push_is_refused_and_leaves_state_untouched(frames, nnz, code):
    from psgd.servers.shard import ShardServer
    cfg = _cfg()
    layout = make_layout([("w", (100,))], 1)
    server = ShardServer(cfg, 0, "127.0.0.1:0", torch.ones(100), layout.fingerprint)
    replies = []
    server._reply = lambda identity, record, frames=(): replies.append(record)
    server._reply_params = lambda identity, record, params: replies.append(record)
    try:
        server.handle(b"w0", P.encode(P.Register(req=1, rank=0, fingerprint=layout.fingerprint)))
        push = P.PushPull(req=2, rank=0, seq=0, clock=0, encoding="topk", numel=100, nnz=nnz)
        server.handle(b"w0", P.encode(push, [tensor_frame(t) for t in frames]))
    finally:
        server._sock.close()
    assert isinstance(replies[-1], P.Error) and replies[-1].code == code
    assert torch.equal(server.state.params, torch.ones(100))
    assert server.state.version == 0 and server.state.last_seq[0] == -1
