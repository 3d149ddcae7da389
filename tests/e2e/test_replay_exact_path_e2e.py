"""`psgd replay` computes every gradient one by one (the exact path), even when
the recorded config asks the simulator for batched gradients (sim.batched)."""
import pytest
import torch
from conftest import ROOT, launch

import psgd.sim.batched as batched
from psgd.sim.replay import replay

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_replay_never_takes_the_batched_path(tmp_path, monkeypatch):
    config = tmp_path / "quickstart.yaml"
    config.write_text((ROOT / "configs" / "quickstart.yaml").read_text())
    run_dir = tmp_path / "run"
    code, output, _ = launch(config, run_dir, "train.steps_per_worker=20", "train.target_accuracy=0.99",
                             "workers.device=cpu", "consistency.mode=asp", "sim.batched=true", timeout=100)
    assert code == 0, output

    def refuse(*args, **kwargs):
        raise AssertionError("a replay built the batched path")
    monkeypatch.setattr(batched.BatchedGradients, "__init__", refuse)
    result = replay(run_dir)
    assert result.identical
    saved = torch.load(run_dir / "model.pt", weights_only=True)
    assert all(torch.equal(result.state_dict[k], saved[k]) for k in saved)
