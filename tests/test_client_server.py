"""The PS client against real shard loops on loopback: exact update arithmetic,
exactly-once resends, error replies that leave state untouched."""
import torch

from psgd import protocol as P
from psgd.config import load_config
from psgd.tasks import build_model, load_task
from workers.client import PSClient, RemoteError


def synthetic_cfg(**over):
    sets = ["task.model=linear", "task.dataset=synthetic", "cluster.servers=2", "cluster.workers=1",
            "consistency.mode=asp"] + [f"{k}={v}" for k, v in over.items()]
    return load_config(None, sets)


def test_n_pushes_move_parameters_by_n_lr_v(shards):
    cfg = synthetic_cfg(**{"optimizer.lr": 0.5})
    model = build_model(cfg, load_task(cfg))
    cluster = shards(cfg, model)
    client = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None)
    start = [t.clone() for t in client.register()]
    grads = [torch.full((n,), 0.25) for n in cluster.layout.shard_sizes]
    for _ in range(50):
        out = client.push_pull(grads)
    for s, t in enumerate(out):
        torch.testing.assert_close(t, start[s] - 50 * 0.5 * 0.25, rtol=0, atol=1e-5)
    assert client.clock == 50
    client.close()
