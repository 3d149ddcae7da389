"""processes.json is removed only if the file lists this process; the parent-death
signal is there (the child that outlives a killed parent: tests/e2e/test_lifeline_e2e.py)."""
from __future__ import annotations

import json
import os
import sys

from psgd.runtime.lifeline import forget_processes_file, set_parent_death_signal


def test_processes_file_of_another_run_is_left_alone(tmp_path):
    path = tmp_path / "processes.json"
    path.write_text(json.dumps([{"role": "server", "index": 0, "pid": os.getpid() + 1}]))
    forget_processes_file(tmp_path, os.getpid())
    assert path.exists()
    forget_processes_file(tmp_path, os.getpid() + 1)
    assert not path.exists()
    forget_processes_file(tmp_path, 1)  # missing file: nothing to do, no error
    forget_processes_file(None, 1)


def test_death_signal_is_available_on_linux():
    assert set_parent_death_signal() is sys.platform.startswith("linux")
