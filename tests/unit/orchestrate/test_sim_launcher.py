"""`psgd launch --on sim` leaves an ordinary run directory, and the same config
and seed give the same files, byte for byte."""
import json
from pathlib import Path

import torch

from psgd.config import load_config
from psgd.orchestrate.launchers.sim import SimLauncher

SETS = ["task.model=mlp", "task.dataset=digits", "task.batch_size=16", "cluster.servers=2", "cluster.workers=4",
        "consistency.mode=ssp", "consistency.staleness=1", "wire.compression=topk", "wire.topk_ratio=0.1",
        "workers.delay={dist: exponential, mean: 1.0}", "train.steps_per_worker=25", "eval.every_s=0.002",
        "sim.compute_ms=0.5", "cluster.launcher=sim"]


def launch(tmp_path, name):
    run_dir = tmp_path / name
    run_dir.mkdir()
    result = SimLauncher(load_config(None, SETS), run_dir).run()
    assert result.code == 0, result.reason
    return run_dir


def test_same_seed_twice_gives_identical_files(tmp_path):
    a, b = launch(tmp_path, "a"), launch(tmp_path, "b")
    for name in ("metrics.jsonl", "metrics.csv", "model.pt", "config.yaml"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    summary = json.loads((a / "summary.json").read_text())
    assert summary["clock"] == "simulated"
    assert summary["worker_steps"] == 4 * 25
    assert summary["real_time_s"] > 0
    evals = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["event"] == "eval"]
    assert len(evals) > 3 and evals[-1]["final"]
    assert summary["wall_time_s"] == round(evals[-1]["t"], 3)  # simulated seconds throughout


def test_psgd_launch_on_sim_writes_a_run_directory(tmp_path):
    from psgd.cli import main
    out = tmp_path / "run"
    sets = [a for s in SETS if not s.startswith("cluster.launcher") for a in ("--set", s)]
    config = Path(__file__).parents[3] / "configs" / "quickstart.yaml"
    assert main(["launch", str(config), "--on", "sim", "--quiet", "--out", str(out), *sets,
                 "--set", f"run.out_dir={tmp_path}"]) == 0
    for name in ("config.yaml", "metrics.jsonl", "metrics.csv", "summary.json", "model.pt"):
        assert (out / name).is_file(), name
    assert "launcher: sim" in (out / "config.yaml").read_text()
    assert json.loads((out / "summary.json").read_text())["clock"] == "simulated"


def test_psgd_launch_with_cluster_launcher_sim_runs_on_the_simulator(tmp_path):
    import psgd
    summary = psgd.launch(load_config(None, SETS), out=str(tmp_path / "api"))
    assert summary.clock == "simulated" and summary.run_dir == tmp_path / "api"
    direct = launch(tmp_path, "direct")  # the same config on the SimLauncher itself
    for name in ("metrics.jsonl", "model.pt"):
        assert (tmp_path / "api" / name).read_bytes() == (direct / name).read_bytes(), name
    assert summary.total_updates == json.loads((direct / "summary.json").read_text())["total_updates"]


def test_a_run_stopped_by_the_clock_still_counts_the_bytes_pushed(tmp_path):
    # No compression, plain gradients: every step pushes the whole fp32 model once.
    sets = [s for s in SETS if not s.startswith(("wire.", "train.steps"))]
    cfg = load_config(None, sets + ["train.steps_per_worker=1000000", "train.max_time_s=0.01"])
    run_dir = tmp_path / "capped"
    run_dir.mkdir()
    result = SimLauncher(cfg, run_dir).run()
    assert result.code == 0, result.reason
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    done = [e for e in events if e["event"] == "done" and e["role"] == "worker"]
    assert sorted(e["rank"] for e in done) == [0, 1, 2, 3]
    model_bytes = 4 * sum(t.numel() for t in torch.load(run_dir / "model.pt").values())
    assert all(e["bytes_sent"] == e["pushes"] * model_bytes for e in done)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["wire_bytes_sent"] == sum(e["bytes_sent"] for e in done) > 0
    assert summary["worker_steps"] < 4 * 1000000
