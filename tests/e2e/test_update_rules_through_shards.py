"""Server update rules equal torch.optim given the same gradients, on flat tensors and through real shards."""
import pytest
import torch
from optim_reference import RULES, grads_sequence

from psgd.config import load_config
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_pushes_through_shards_match_torch_optim(name, shards):
    """Real shard loops and sockets: the parameters a worker pulls after N pushes
    equal torch.optim's after the same N gradients."""
    sets, make_opt = RULES[name]
    cfg = load_config(None, sets + ["task.model=linear", "task.dataset=synthetic", "cluster.servers=2",
                                    "cluster.workers=1", "consistency.mode=asp"])
    model = build_model(cfg, load_task(cfg))
    cluster = shards(cfg, model)
    layout = cluster.layout
    client = PSClient(cluster.addresses, layout, rank=0, heartbeat_s=None)
    client.register()
    ref = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
    opt = make_opt(ref)
    total = sum(p.numel() for p in ref)
    for g in grads_sequence(20, total, seed=3):
        full = list(torch.split(g, [p.numel() for p in ref]))
        full = [t.reshape(p.shape) for t, p in zip(full, ref)]
        pulled = client.push_pull(layout.flatten(full))
        for p, t in zip(ref, full):
            p.grad = t.clone()
        opt.step()
    got = [torch.empty_like(p) for p in ref]
    layout.unflatten(pulled, got)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)
    client.close()
