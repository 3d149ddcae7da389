"""Every wire encoding under the reliability suite: the quickstart with top-k
and checkpoints on completes; for each encoding a SIGKILLed shard is restarted
from its snapshot and push log with nothing acknowledged lost; a top-k push
holding a NaN is refused and the shard stays up (also across a replay)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, kill_tree, psgd_cmd, read_events, spawn, wait_for, write_config

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient

pytestmark = pytest.mark.e2e
FAST_RETRY = {"request_timeout_s": 1.0, "max_retries": 60, "timeout_s": 5.0, "heartbeat_s": 0.5}


def worker_steps(run_dir, rank):
    path = run_dir / "events" / f"worker-{rank}.jsonl"
    return path.read_text().count('"event": "step"') if path.exists() else 0


def run_launch(args, cwd):
    return spawn(psgd_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(cwd))


def finish(proc, timeout):
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, output


@pytest.mark.timeout(180)
def test_quickstart_with_topk_and_checkpoints_completes(tmp_path):
    out, steps = tmp_path / "run", 60  # a clean stop snapshots every shard, however short the run
    proc = run_launch(["launch", str(ROOT / "configs" / "quickstart.yaml"), "--out", str(out), "--quiet",
                       "--set", "wire.compression=topk", "--set", "workers.device=cpu",
                       "--set", f"train.steps_per_worker={steps}"], tmp_path)
    code, output = finish(proc, 170)
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["restarts"] == 0
    assert summary["total_updates"] == 4 * steps and summary["compression_ratio"] < 0.05
    assert list((out / "checkpoints").glob("shard-*.pt"))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("compression", ["fp16", "bf16", "topk", "int8", "int2_ef"])
def test_killed_shard_loses_nothing_with_each_encoding(tmp_path, compression):
    steps = 160
    cfg = write_config(tmp_path / "c.yaml", cluster=FAST_RETRY, wire={"compression": compression},
                       train={"steps_per_worker": steps, "max_time_s": 100},
                       checkpoint={"every_updates": 50, "every_s": 0}, eval={"enabled": False},
                       supervision={"max_restarts": 2, "backoff_s": 0.2})
    out = tmp_path / "run"
    proc = run_launch(["launch", str(cfg), "--out", str(out), "--quiet"], tmp_path)
    assert wait_for(lambda: worker_steps(out, 0) >= 70, timeout=60), "training did not get going"
    entries = json.loads((out / "processes.json").read_text())
    os.kill(next(e["pid"] for e in entries if e["role"] == "server" and e["index"] == 0), signal.SIGKILL)
    code, output = finish(proc, 110)
    assert code == 0, output
    events = read_events(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["restarts"] == 1
    done = {e["rank"]: e for e in events if e.get("event") == "done"}
    assert {r: e["pushes"] for r, e in done.items()} == {0: steps, 1: steps}
    latest = {}
    for e in events:
        if e.get("event") == "server_stats":
            latest[e["index"]] = e["version"]
    assert latest == {0: 2 * steps, 1: 2 * steps}  # each acknowledged push applied exactly once


def shard_events(run_dir):
    path = run_dir / "events" / "server-0.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def start_shard(config, run_dir):
    proc = spawn([sys.executable, "-m", "psgd.cli", "server", str(config), "--shard", "0", "--run-dir",
                  str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    n = sum(e["event"] == "ready" for e in shard_events(run_dir))
    wait_for(lambda: sum(e["event"] == "ready" for e in shard_events(run_dir)) > n or proc.poll() is not None,
             timeout=60)
    assert proc.poll() is None, proc.stderr.read()
    return proc


@pytest.mark.timeout(90)
def test_nan_topk_push_is_refused_and_the_shard_stays_up(tmp_path):
    address = f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}"
    config = write_config(tmp_path / "c.yaml", cluster={"servers": [address], "workers": 1, "timeout_s": 30.0},
                          task={"model": "linear", "dataset": "synthetic"}, wire={"compression": "topk"})
    cfg = load_config(config)
    layout = layout_for_module(build_model(cfg, load_task(cfg)), 1)
    n = layout.shard_sizes[0]
    run = tmp_path / "run"
    proc = start_shard(config, run)
    client = PSClient([address], layout, rank=0, encoding="topk", topk_ratio=0.5, request_timeout_s=5)
    try:
        client.register()
        assert client.push([torch.ones(n)])[0].applied
        poisoned = torch.ones(n)
        poisoned[0] = float("nan")
        assert not client.push([poisoned])[0].applied
        assert proc.poll() is None
        client.encoder.codec.residuals[0].zero_()  # the NaN stayed in the error-feedback residual
        assert client.push([torch.ones(n)])[0].applied
        before = client.stats()[0]
        assert before["counters"]["rejected_nonfinite"] == 1 and before["version"] == 2
    finally:
        client.close()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc = start_shard(config, run)  # the refused push is in the log and replays as refused
    try:
        resumed = [e for e in shard_events(run) if e["event"] == "resumed"][-1]
        assert resumed["version"] == 2 and resumed["replayed"] >= 3
    finally:
        kill_tree(proc)
