"""Quorum merging end to end: `psgd launch` with a straggler merges its late deltas into the
next round (counted in summary.json), and `psgd replay` re-executes the run bit for bit,
grace windows included (each close is in the shards' record)."""
import json

import pytest
import torch
from conftest import ROOT, launch, run_psgd

pytestmark = pytest.mark.e2e

QUORUM = ["consistency.mode=bsp", "local.steps=4", "consistency.quorum.size=3", "consistency.quorum.grace_s=auto",
          "consistency.quorum.grace_max_s=0.005", "workers.slowdown={3: 4.0}", "workers.device_ms=2",
          "train.steps_per_worker=48", "train.target_accuracy=0.99", "workers.device=cpu"]


@pytest.mark.timeout(150)
def test_a_quorum_run_counts_its_late_deltas_and_replays_bit_for_bit(tmp_path):
    config = tmp_path / "quickstart.yaml"
    config.write_text((ROOT / "configs" / "quickstart.yaml").read_text())
    run_dir = tmp_path / "run"
    code, output, summary = launch(config, run_dir, *QUORUM, timeout=120)
    assert code == 0, output
    assert summary["worker_steps"] == 4 * 48  # the straggler trained its whole budget
    assert summary["quorum_carried"] > 0 and summary["late_dropped"] == 0
    assert summary["quorum_closed_by_grace"] > 0  # windows closed: the record holds their closes
    assert summary["total_updates"] > 48 // 4  # the fast workers' rounds merged without the straggler
    code, out, err = run_psgd("replay", str(run_dir), "--json", "--out", str(tmp_path / "replayed.pt"),
                              cwd=tmp_path, timeout=60)
    result = json.loads(out) if out.strip().startswith("{") else {}
    assert code == 0 and result["identical"] and result["compared_model"], (result, err)
    replayed = torch.load(tmp_path / "replayed.pt", weights_only=True)
    saved = torch.load(run_dir / "model.pt", weights_only=True)
    assert all(torch.equal(replayed[k], saved[k]) for k in saved)
