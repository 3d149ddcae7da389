"""Silent corruption made loud, with real shard processes: a shard is killed
mid-run after top-k pushes (sparse push-log records); then a flipped bit in its
newest snapshot is recovered from the previous snapshot plus the logs (same
parameters as an undamaged restart, bit for bit), while a bad byte in the push
log or two damaged snapshots end the shard with one line naming the file."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from conftest import kill_tree, spawn, wait_for, write_config

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient

pytestmark = pytest.mark.e2e
PUSHES = 35


def events(run_dir):
    path = run_dir / "events" / "server-0.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def start_shard(config, run_dir):
    proc = spawn([sys.executable, "-m", "psgd.cli", "server", str(config), "--shard", "0", "--run-dir",
                  str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    n = sum(e["event"] == "ready" for e in events(run_dir))
    wait_for(lambda: sum(e["event"] == "ready" for e in events(run_dir)) > n or proc.poll() is not None,
             timeout=60)
    return proc


def read_params(address, layout):
    c = PSClient([address], layout, role="evaluator", request_timeout_s=5, max_retries=3)
    try:
        return [t.clone() for t in c.register()]
    finally:
        c.close()


def flip(path, at, bit):
    data = bytearray(path.read_bytes())
    data[at] ^= 1 << bit
    path.write_bytes(bytes(data))


@pytest.mark.timeout(150)
def test_damaged_snapshot_falls_back_and_damaged_log_is_reported(tmp_path):
    port = free_ports("127.0.0.1", 1)[0]
    address = f"127.0.0.1:{port}"
    config = write_config(tmp_path / "c.yaml", cluster={"servers": [address], "workers": 1, "timeout_s": 30.0},
                          consistency={"mode": "asp"}, task={"model": "linear", "dataset": "synthetic"},
                          wire={"compression": "topk", "topk_ratio": 0.1},
                          checkpoint={"every_updates": 10, "every_s": 0})
    cfg = load_config(config)
    layout = layout_for_module(build_model(cfg, load_task(cfg)), 1)
    run = tmp_path / "run"
    proc = start_shard(config, run)
    assert proc.poll() is None, proc.stderr.read()
    gen = torch.Generator().manual_seed(0)
    client = PSClient([address], layout, rank=0, encoding="topk", topk_ratio=0.1, request_timeout_s=5)
    try:
        client.register()
        for _ in range(PUSHES):
            acks = client.push([torch.randn(layout.shard_sizes[0], generator=gen)])
            assert acks[0].applied
    finally:
        client.close()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ckpt = run / "checkpoints"
    assert {p.name for p in ckpt.glob("shard-0*.pt")} == {"shard-0.pt", "shard-0.prev.pt"}

    copies = {}
    for name in ("pristine", "bad_snapshot", "bad_log", "both_snapshots"):
        copies[name] = tmp_path / name
        shutil.copytree(run, copies[name])
    newest_log = max((copies["bad_log"] / "checkpoints").glob("shard-0.log.*"),
                     key=lambda p: int(p.suffix[1:]))
    assert newest_log.stat().st_size > 0
    flip(newest_log, newest_log.stat().st_size // 3, 4)
    snap = copies["bad_snapshot"] / "checkpoints" / "shard-0.pt"
    flip(snap, snap.stat().st_size // 2, 6)
    for name in ("shard-0.pt", "shard-0.prev.pt"):
        path = copies["both_snapshots"] / "checkpoints" / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    params = {}
    for name in ("pristine", "bad_snapshot"):
        proc = start_shard(config, copies[name])
        try:
            assert proc.poll() is None, proc.stderr.read()
            params[name] = read_params(address, layout)
            resumed = [e for e in events(copies[name]) if e["event"] == "resumed"][-1]
            assert resumed["version"] == PUSHES
        finally:
            kill_tree(proc)
        if name == "pristine":
            assert resumed["snapshot_version"] == 30 and resumed["replayed"] == 5
        else:  # the previous snapshot plus both logs
            assert resumed["snapshot_version"] == 20 and resumed["replayed"] == 15
            assert resumed["skipped"] == [str(snap)]
    assert all(torch.equal(a, b) for a, b in zip(params["pristine"], params["bad_snapshot"]))

    for name, names_file in (("bad_log", newest_log), ("both_snapshots",
                                                          copies["both_snapshots"] / "checkpoints" / "shard-0.pt")):
        proc = start_shard(config, copies[name])
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and str(names_file) in lines[0] and "Traceback" not in err, err
