"""The Python API end to end: a user's own script under torchrun against `psgd server`
shards, and `psgd.launch` with a model and dataset defined in the caller's __main__."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, launch, psgd_cmd, run_psgd, spawn, stop

pytestmark = pytest.mark.e2e

EXAMPLE = ROOT / "examples" / "train_digits.py"
EPOCHS = 3  # 45 batches an epoch: 135 steps per worker
# Two ranks, not four: each rank is a fresh interpreter that imports torch and, on building its
# torch.optim.Adam, torch._dynamo (about 6 s of CPU a rank); two still train one model asynchronously.
RANKS = 2


def free_port_pair():
    from psgd.runtime.ports import free_ports
    return free_ports("127.0.0.1", 2)


@pytest.mark.timeout(400)
def test_plain_script_under_torchrun_reaches_the_builtin_workers_accuracy(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "train_digits.py")
    # The example differs from a plain torch script in exactly three lines.
    assert len(re.findall(r"# psgd$", EXAMPLE.read_text(), flags=re.M)) == 3
    ports = free_port_pair()
    job = {"cluster": {"servers": [f"127.0.0.1:{p}" for p in ports], "workers": RANKS, "timeout_s": 30.0},
           "consistency": {"mode": "asp"},
           "task": {"model": "train_digits:DigitsCNN", "dataset": "train_digits:digits", "batch_size": 32},
           "optimizer": {"name": "adam", "lr": 0.001}, "workers": {"device": "cpu"}}
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job))
    servers = [spawn(psgd_cmd("server", str(config), "--shard", str(i)), cwd=str(tmp_path),
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]
    try:
        run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                              str(RANKS), "train_digits.py", str(config), str(EPOCHS)],
                             cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        scripts = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)", run.stdout)]
        assert len(scripts) == RANKS
        code, stdout, stderr = run_psgd("eval", str(config), "--json", cwd=tmp_path, timeout=120)
        assert code == 0, stderr
        served = json.loads(stdout)
        assert served["updates"] == RANKS * 45 * EPOCHS  # every push of every rank (the updates the run applied)
    finally:
        for s in servers:
            stop(s)
    # The built-in worker: the same CNN, data, Adam and number of steps, through `psgd launch`.
    builtin = tmp_path / "builtin.yaml"
    builtin.write_text(yaml.safe_dump({
        **job, "cluster": {"servers": 2, "workers": RANKS},
        "task": {"model": "cnn", "dataset": "digits", "batch_size": 32},
        "train": {"steps_per_worker": 45 * EPOCHS, "max_time_s": 240, "target_accuracy": 0.9},
        "eval": {"every_s": 5.0}}))
    code, output, summary = launch(builtin, tmp_path / "builtin-run", timeout=300)
    assert code == 0, output
    print(f"torchrun script: {served['accuracy']:.4f} (ranks' own: {scripts}); "
          f"built-in worker: {summary['final_test_accuracy']:.4f}")
    assert served["accuracy"] >= summary["final_test_accuracy"] - 0.03, (served, summary["final_test_accuracy"])
    assert served["accuracy"] >= 0.9


LAUNCH_SCRIPT = '''
import json, sys
import torch
from torch import nn
import psgd

class MyNet(nn.Module):  # defined in __main__: it reaches the children by value
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))

    def forward(self, x):
        return self.body(x)

def my_data(n=512):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] - x[:, 2] > 0).long()
    return (x[:384], y[:384]), (x[384:], y[384:])

if __name__ == "__main__":
    cfg = psgd.load_config({"cluster": {"servers": 2, "workers": 2}, "optimizer": {"name": "sgd", "lr": 0.2},
                            "train": {"steps_per_worker": 150, "target_accuracy": 0.9},
                            "eval": {"every_s": 0.5}, "workers": {"device": "cpu"}},
                           overrides=["task.batch_size=16"])
    torch.manual_seed(7)
    model = MyNet()
    summary = psgd.launch(cfg, model=model, dataset=my_data, out=sys.argv[1])
    print(json.dumps({"summary": dict(summary), "run_dir": str(summary.run_dir),
                      "accuracy_attr": summary.final_test_accuracy}))
'''


@pytest.mark.timeout(180)
def test_launch_from_python_with_a_model_object_and_a_dataset_function(tmp_path):
    script = tmp_path / "my_job.py"
    script.write_text(LAUNCH_SCRIPT)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(script), str(out)], cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    s = result["summary"]
    assert s["status"] == "ok" and s["workers"] == 2 and s["servers"] == 2
    assert s["total_updates"] == 300 and s["final_test_accuracy"] >= 0.9
    assert Path(result["run_dir"]) == out and (out / "model.pt").exists()
    assert (out / "objects" / "model.pkl").exists() and (out / "objects" / "dataset.pkl").exists()
    assert result["accuracy_attr"] == s["final_test_accuracy"]
