"""End to end: a real launch with fp16 on the wire halves the gradient bytes
and still trains; the worker `done` events and summary.json report it."""
import pytest
from conftest import launch, read_events

from psgd.config import load_config
from psgd.tasks import build_model, load_task


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_fp16_run_halves_wire_bytes_and_trains(small_config, tmp_path):
    config = small_config(wire={"compression": "fp16"})
    cfg = load_config(config)
    numel = sum(p.numel() for p in build_model(cfg, load_task(cfg)).parameters())
    code, output, summary = launch(config, tmp_path / "run")
    assert code == 0, output
    done = [e for e in read_events(tmp_path / "run") if e["event"] == "done" and e["role"] == "worker"]
    assert len(done) == 2
    for e in done:
        assert e["steps"] > 0
        assert e["bytes_sent"] == 2 * numel * e["clock"]   # every push: 2 bytes per parameter
        assert e["fp32_bytes"] == 4 * numel * e["clock"]
        assert e["compression_ratio"] == 0.5
    assert summary["wire_bytes_sent"] == sum(e["bytes_sent"] for e in done)
    assert summary["compression_ratio"] == 0.5
    assert summary["final_test_accuracy"] >= 0.7  # 10 classes: chance is 0.1
