"""`psgd launch --on sim` with a `wire.compression` that chooses the codec per shard: the
simulated quickstart runs, and every push it counts is each shard's push in its own codec."""
import pytest
import torch
from conftest import ROOT, launch, read_events

from psgd.config import load_config
from psgd.core.sharding import make_layout
from psgd.wire.codecs.runs import push_plans
from psgd.wire.payload import wire_nbytes

pytestmark = pytest.mark.e2e

# On 3 shards the quickstart MLP's are 1604, 1604 and 1602 values: the last is below small_below.
PER_SHARD = "{default: int8, small: none, small_below: 1603}"


@pytest.mark.timeout(60)
def test_the_simulated_quickstart_pushes_each_shard_in_its_own_codec(tmp_path):
    config = tmp_path / "quickstart.yaml"
    config.write_text((ROOT / "configs" / "quickstart.yaml").read_text())
    run_dir = tmp_path / "run"
    code, output, summary = launch(config, run_dir, "cluster.launcher=sim", "cluster.servers=3",
                                   "train.steps_per_worker=100", "train.stop_at_target=false",
                                   f"wire.compression={PER_SHARD}", timeout=50)
    assert code == 0, output
    assert summary["status"] == "ok" and summary["clock"] == "simulated" and summary["worker_steps"] == 4 * 100
    saved = torch.load(run_dir / "model.pt", weights_only=True)
    layout = make_layout([(k, tuple(v.shape)) for k, v in saved.items()], 3)
    plans = push_plans(load_config(run_dir / "config.yaml").wire, layout, local_updates=False)
    assert [[r.encoding for r in plan] for plan in plans] == [["int8"], ["int8"], ["none"]]
    per_push = sum(wire_nbytes(plan[0].encoding, n) for plan, n in zip(plans, layout.shard_sizes))
    done = [e for e in read_events(run_dir) if e.get("event") == "done" and e.get("role") == "worker"]
    assert len(done) == 4
    for e in done:  # every push: each shard's bytes in its codec, as a real client counts them
        assert e["bytes_sent"] == e["pushes"] * per_push and e["peak_push_bytes"] == per_push
    assert summary["wire_bytes_sent"] == 4 * 100 * per_push
    assert summary["compression_ratio"] == round(per_push / (4 * sum(layout.shard_sizes)), 6) < 1
