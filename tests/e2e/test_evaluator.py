"""The evaluator against real shards: it scores exactly what the shards hold and saves it loadably."""
import torch

from psgd.config import load_config
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient
from psgd.workers.evaluator import Evaluator, evaluate_servers


def test_evaluator_scores_and_saves_the_parameters_the_shards_hold(shards, small_config, tmp_path):
    base = load_config(small_config())
    model = build_model(base, load_task(base))
    cluster = shards(base, model)
    cfg = load_config(small_config(cluster={"servers": cluster.addresses, "workers": 2}))
    # Move the shards away from the initial model with one known push.
    pusher = PSClient(cluster.addresses, cluster.layout, rank=0)
    try:
        pusher.register()
        grads = [torch.full((n,), 0.5) for n in cluster.layout.shard_sizes]
        pusher.push(grads)
    finally:
        pusher.close()
    expected = build_model(cfg, load_task(cfg))
    with torch.no_grad():
        flat = cluster.layout.flatten([p.detach() for p in expected.parameters()])
        cluster.layout.unflatten([f - cfg.optimizer.lr * 0.5 for f in flat], list(expected.parameters()))
    want_acc, want_loss = load_task(cfg).evaluate(expected)

    ev = Evaluator(cfg)
    try:
        ev.connect()
        result = ev.evaluate()
    finally:
        ev.close()
    assert (result["accuracy"], result["test_loss"]) == (want_acc, want_loss)
    assert result["versions"] == [1, 1]  # one update on each shard

    out = tmp_path / "model.pt"
    again = evaluate_servers(cfg, save=out)
    loaded = build_model(cfg, load_task(cfg))
    loaded.load_state_dict(torch.load(out, weights_only=True))
    assert again["accuracy"] == want_acc
    for a, b in zip(loaded.parameters(), expected.parameters()):
        assert torch.equal(a, b)
