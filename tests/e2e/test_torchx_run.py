"""The torchx component under `torchx run -s local_cwd`: every replica runs
`psgd run`, takes its role from PSGD_ROLE and trains quickstart."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, kill_tree, spawn

from psgd.runtime.ports import free_ports

pytestmark = pytest.mark.e2e

COMPONENT = ROOT / "psgd" / "orchestrate" / "cluster" / "torchx_component.py"


@pytest.mark.timeout(240)
def test_torchx_local_cwd_trains_quickstart_with_roles_from_the_environment(tmp_path):
    bin_dir = Path(sys.executable).parent  # torchx and the psgd console script of this environment
    run_dir = tmp_path / "run"
    cmd = [str(bin_dir / "torchx"), "run", "-s", "local_cwd", f"{COMPONENT}:psgd",
           "--config", str(ROOT / "configs" / "quickstart.yaml"), "--port", str(free_ports("127.0.0.1", 1)[0]),
           "--run_dir", str(run_dir)]
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = spawn(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=220)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0 and "SUCCEEDED" in output, output[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["missing_events"] == []
    assert summary["total_updates"] == 2000 and summary["final_test_accuracy"] >= 0.93  # quickstart's target
    roles = {}
    for path in (run_dir / "events").glob("run-*.jsonl"):
        e = json.loads(path.read_text().splitlines()[0])
        roles[(e["role_name"], e["role_index"])] = (e["launcher"], e["rank"], e["world_size"])
    expected = [("server", 0), ("server", 1)] + [("worker", r) for r in range(4)] + [("evaluator", 0)]
    assert roles == {key: ("torchx", rank, 7) for rank, key in enumerate(expected)}
    assert (run_dir / "model.pt").exists() and (run_dir / "metrics.csv").exists()
