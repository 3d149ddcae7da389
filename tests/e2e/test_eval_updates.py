"""`psgd eval` against running shards reports the updates the run applied
(every update reaches every shard once), not their sum over shards."""
import json

import pytest
import torch
import yaml
from conftest import run_psgd

from psgd.config import load_config
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient

pytestmark = pytest.mark.e2e

SETS = {"task": {"model": "linear", "dataset": "synthetic"}, "consistency": {"mode": "asp"},
        "cluster": {"servers": 2, "workers": 1}}


@pytest.mark.timeout(60)
def test_psgd_eval_reports_the_updates_applied_not_their_sum_over_shards(shards, tmp_path):
    cfg = load_config(None, data=SETS)
    cluster = shards(cfg, build_model(cfg, load_task(cfg)))
    client = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None)
    client.register()
    grads = [torch.full((n,), 0.01) for n in cluster.layout.shard_sizes]
    for _ in range(7):
        client.push(grads)
    client.close()
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump({**SETS, "cluster": {"servers": cluster.addresses, "workers": 1}}))
    code, out, err = run_psgd("eval", str(config), "--json", cwd=tmp_path, timeout=50)
    assert code == 0, err
    result = json.loads(out)
    assert (result["updates"], result["versions"]) == (7, [7, 7])
    code, out, err = run_psgd("eval", str(config), cwd=tmp_path, timeout=50)
    assert code == 0 and out.rstrip().endswith("updates 7"), out + err
