"""`psgd launch` end to end: real processes, real sockets, real files."""
import json
import os
import signal
import subprocess
import time

import pytest
import torch
from conftest import kill_tree, launch, psgd_cmd, read_events, spawn, wait_for

from psgd.config import load_config
from psgd.tasks import build_model, load_task

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_run_leaves_config_metrics_summary_and_loadable_model(small_config, tmp_path):
    config = small_config(train={"steps_per_worker": 150, "max_time_s": 60, "target_accuracy": 0.8})
    out = tmp_path / "run"
    code, output, summary = launch(config, out)
    assert code == 0, output
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "model.pt"):
        assert (out / name).exists(), name
    assert not (out / "processes.json").exists()  # only while the run is live
    for key in ("mode", "staleness", "servers", "workers", "wall_time_s", "total_updates", "final_test_accuracy",
                "final_test_loss", "time_to_target_s", "staleness_mean", "staleness_max", "max_clock_gap",
                "rejected_updates"):
        assert key in summary, key
    assert summary["mode"] == "asp" and summary["servers"] == 2 and summary["workers"] == 2
    assert summary["total_updates"] == 300 and summary["worker_steps"] == 300
    assert summary["final_test_accuracy"] >= 0.8 and summary["time_to_target_s"] is not None
    events = read_events(out)
    assert all("t" in e and "role" in e for e in events)
    assert {e["role"] for e in events} == {"server", "worker", "evaluator"}
    cfg = load_config(out / "config.yaml")
    model = build_model(cfg, load_task(cfg))
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    acc, _ = load_task(cfg).evaluate(model)
    assert acc == pytest.approx(summary["final_test_accuracy"])


USER_MODULE = '''
import torch
from torch import nn

def make_model(width=16):
    return nn.Sequential(nn.Linear(4, width), nn.Tanh(), nn.Linear(width, 2))

def make_data(n=512):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    ds = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.random_split(ds, [n - 128, 128], generator=g)
'''


@pytest.mark.timeout(120)
def test_user_model_and_dataset_beside_the_config(small_config, tmp_path):
    (tmp_path / "my_task.py").write_text(USER_MODULE)
    config = small_config(task={"model": "my_task:make_model", "dataset": "my_task:make_data",
                                "batch_size": 16, "model_args": {"width": 8}},
                          train={"steps_per_worker": 150, "target_accuracy": 0.85})
    out = tmp_path / "run"
    code, output, summary = launch(config, out)
    assert code == 0, output
    assert summary["final_test_accuracy"] >= 0.85


@pytest.mark.timeout(60)
def test_crashed_child_is_reported_with_its_cause(small_config, tmp_path):
    # Pre-flight runs this forward in the launcher and passes; the children then crash while training.
    (tmp_path / "broken.py").write_text(
        "import sys\nfrom torch import nn\n\n\nclass Net(nn.Linear):\n"
        "    def forward(self, x):\n"
        "        if '--supervised' in sys.argv:\n"
        "            raise RuntimeError('forward exploded')\n"
        "        return super().forward(x)\n\n\ndef make():\n    return Net(64, 10)\n")
    config = small_config(task={"model": "broken:make"}, supervision={"max_restarts": 0})
    code, output, summary = launch(config, tmp_path / "run", timeout=45)
    assert code == 1
    assert "exited with code 1" in output and "forward exploded" in output
    assert summary["status"] == "failed"


def pids_alive(pids):
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split()[2] != "Z":
                alive.append(pid)
    return alive


@pytest.mark.timeout(90)
def test_sigterm_stops_every_process_within_5s(small_config, tmp_path):
    config = small_config(train={"steps_per_worker": 100000, "max_time_s": 600})
    out = tmp_path / "run"
    proc = spawn(psgd_cmd("launch", str(config), "--out", str(out), "--quiet"),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (out / "start.json").exists(), timeout=60), "run never started"
        pids = [p["pid"] for p in json.loads((out / "processes.json").read_text())]
        assert len(pids) == 2 + 2 + 1
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: proc.poll() is not None and not pids_alive(pids), timeout=5.0), pids_alive(pids)
        assert proc.returncode == 128 + signal.SIGTERM
        assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    finally:
        kill_tree(proc)
