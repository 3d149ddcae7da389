"""User code that passes the launcher's pre-flight trains; an error only the children hit is
reported once and not restarted. (The mistakes pre-flight catches are tests/unit/cli/test_preflight.py:
in-process, where the process guard proves nothing was spawned.)"""
import json

import pytest
from conftest import launch
from support.user_code import USER_TASK

pytestmark = pytest.mark.e2e



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
