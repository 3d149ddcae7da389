"""Mistakes in the user's own model or data fail `psgd launch` in the parent, at once,
naming the problem, with nothing spawned and nothing restarted."""
import json
import subprocess

import pytest
from conftest import launch, psgd_cmd

pytestmark = pytest.mark.e2e

USER_TASK = '''
import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


class Exploding(Net):
    def forward(self, x):
        raise RuntimeError("forward exploded")  # LINE_OF_FORWARD


def _xy(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long()


def good():
    x, y = _xy()
    return (x[:48], y[:48]), (x[48:], y[48:])


def numpy_data():
    x, y = _xy()
    return (x[:48].numpy(), y[:48].numpy()), (x[48:].numpy(), y[48:].numpy())


def short_labels():
    x, y = _xy()
    return (x[:48], y[:40]), (x[48:], y[48:])


def float_labels():
    x, y = _xy()
    return (x[:48], y[:48].float()), (x[48:], y[48:].float())
'''
FORWARD_LINE = next(i for i, line in enumerate(USER_TASK.splitlines(), start=1) if "LINE_OF_FORWARD" in line)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("task, words", [
    ({"model": "user_tsk:Net"}, ["model 'user_tsk:Net'", "cannot import 'user_tsk'"]),
    ({"dataset": "user_task:numpy_data"}, ["train x must be a torch.Tensor, got numpy.ndarray"]),
    ({"dataset": "user_task:short_labels"}, ["train: x has 48 examples but y has 40"]),
    ({"dataset": "user_task:float_labels"}, ["train y has dtype torch.float32 but the task is classification"]),
    ({"model": "user_task:Exploding"}, ["one forward/backward", "RuntimeError: forward exploded",
                                        f"user_task.py:{FORWARD_LINE} in forward"]),
], ids=["model-typo", "numpy", "lengths", "float-labels", "forward-raises"])
def test_user_code_mistakes_fail_in_the_parent_before_any_spawn(small_config, tmp_path, task, words):
    (tmp_path / "user_task.py").write_text(USER_TASK)
    config = small_config(task={"model": "user_task:Net", "dataset": "user_task:good", "batch_size": 16, **task})
    out = tmp_path / "run"
    proc = subprocess.run(psgd_cmd("launch", str(config), "--out", str(out), "--quiet"), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=50)
    assert proc.returncode == 2, proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr  # one message, not psgd's own stack
    assert not out.exists()  # nothing was started, so nothing could be restarted


@pytest.mark.timeout(150)
def test_the_same_user_code_passes_preflight_and_trains(small_config, tmp_path):
    (tmp_path / "user_task.py").write_text(USER_TASK)
    config = small_config(task={"model": "user_task:Net", "dataset": "user_task:good", "batch_size": 16},
                          train={"steps_per_worker": 20, "target_accuracy": None})
    code, output, summary = launch(config, tmp_path / "run", timeout=140)
    assert code == 0, output
    assert summary["total_updates"] == 40


CHILD_ONLY = '''
import sys
from torch import nn


def make():
    if "--supervised" in sys.argv:  # only in the launcher's children: pre-flight passes
        raise RuntimeError("model exploded in a child")
    return nn.Linear(64, 10)
'''


@pytest.mark.timeout(150)
def test_a_start_up_error_in_a_child_is_reported_once_and_not_restarted(small_config, tmp_path):
    (tmp_path / "child_only.py").write_text(CHILD_ONLY)
    config = small_config(task={"model": "child_only:make"}, supervision={"max_restarts": 3, "backoff_s": 2.0})
    code, output, summary = launch(config, tmp_path / "run", timeout=140)
    assert code == 1, output
    assert "model exploded in a child" in output and "not restarted" in output
    assert summary["status"] == "failed" and summary["restarts"] == 0
    metrics = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if ln]
    assert not [e for e in metrics if e.get("event") == "restart"]


LAZY_TASK = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Blobs(Dataset):
    """Examples made on access (as a dataset read from disk would be)."""

    def __init__(self, n, offset):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.offset + i)
        label = (self.offset + i) % 2
        return torch.randn(4, generator=g) + 2.0 * label, label


def data():
    return Blobs(384, 0), Blobs(128, 10_000)


def model():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
'''


@pytest.mark.timeout(150)
def test_a_map_style_dataset_is_read_through_loader_processes(small_config, tmp_path):
    (tmp_path / "lazy_task.py").write_text(LAZY_TASK)
    config = small_config(task={"model": "lazy_task:model", "dataset": "lazy_task:data", "batch_size": 16},
                          workers={"device": "cpu", "loader": {"num_workers": 1}},
                          train={"steps_per_worker": 60, "target_accuracy": 0.9})
    code, output, summary = launch(config, tmp_path / "run", timeout=140)
    assert code == 0, output
    assert summary["total_updates"] == 120 and summary["final_test_accuracy"] >= 0.9
    assert not (tmp_path / "run" / "task").exists()  # a lazy dataset is not copied into the run
