"""A worker killed under local updates is back in training at once, where it left off.

A forked child inherits what the launcher imported (psgd.orchestrate.fork.preload).
The inner torch optimizer a local-update worker builds imported torch._dynamo on
first use, seconds which a restarted worker spent after the start, registered but
idle: with a time budget it could end without a step."""
import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import FAST_RETRY, finish, pid_of, read_events, start_launch, wait_for, worker_steps, write_config

from psgd.bench.fault_metrics import account

LOCAL_STEPS = 8

# What a forked worker does after the launcher's preload: build its inner optimizer.
BUILD_AFTER_PRELOAD = """
import json, sys
import torch
from psgd.config import load_config
from psgd.core.local_methods.optimizers import inner_torch_optimizer
from psgd.orchestrate.fork import preload
cfg = load_config(None, sys.argv[1:])
preload(cfg)
before = set(sys.modules)
inner_torch_optimizer(cfg.optimizer, torch.nn.Linear(4, 2).parameters())
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.timeout(120)
def test_a_forked_worker_builds_its_inner_optimizer_with_nothing_left_to_import():
    # DiLoCo's inner AdamW; in a fresh interpreter, as the launcher is.
    overrides = [f"local.steps={LOCAL_STEPS}", "local.outer_momentum=0.9", "local.outer_nesterov=true",
                 "optimizer.name=adamw", "optimizer.lr=0.01"]
    out = subprocess.run([sys.executable, "-c", BUILD_AFTER_PRELOAD, *overrides], capture_output=True,
                         text=True, check=True, timeout=110).stdout
    assert json.loads(out) == []


@pytest.mark.timeout(150)
def test_a_worker_killed_under_local_sgd_continues_its_budget_and_loses_no_push(tmp_path):
    budget = 20 * LOCAL_STEPS
    cfg = write_config(tmp_path / "c.yaml", cluster=FAST_RETRY, local={"steps": LOCAL_STEPS},
                       train={"steps_per_worker": budget, "max_time_s": 90, "target_accuracy": None},
                       supervision={"max_restarts": 1, "backoff_s": 0.2}, eval={"enabled": False})
    out = tmp_path / "run"
    proc = start_launch(cfg, out)
    # A step event is written once its step() returned: three rounds are pushed.
    assert wait_for(lambda: worker_steps(out, 0) >= 3 * LOCAL_STEPS, timeout=90), "training did not get going"
    os.kill(pid_of(out, "worker", 0), signal.SIGKILL)
    code, output = finish(proc, 120)
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["restarts"] == 1 and summary["status"] == "ok"
    events = read_events(out)
    readies = [e for e in events if e.get("event") == "ready" and e["role"] == "worker" and e["index"] == 0]
    assert len(readies) == 2 and readies[1]["clock"] >= 3  # rejoined where it was, not from zero
    done = {e["rank"]: e for e in events if e.get("event") == "done" and e["role"] == "worker"}
    assert done[1]["steps"] == budget and done[1]["seqs"] == budget // LOCAL_STEPS
    # The restarted process continues after the rounds its predecessor pushed (its seqs, each
    # counted at its nominal length) and trains the rest of the budget itself.
    restarted = done[0]
    inherited = restarted["seqs"] - restarted["pushes"]
    assert 3 <= inherited < budget // LOCAL_STEPS
    assert restarted["steps"] == budget - LOCAL_STEPS * inherited > 0
    # The predecessor trained those rounds: it was killed in the round after them (or while
    # pushing the last one, before that step's event was written).
    first_life = sum(1 for e in events if e.get("event") == "step" and e["rank"] == 0) - restarted["steps"]
    assert LOCAL_STEPS * inherited - 1 <= first_life < LOCAL_STEPS * (inherited + 1)
    # Every shard applied exactly the pushes it acknowledged, and the workers' seqs reconcile.
    assert [p for shard in account(events, 2) for p in shard.problems] == []
