"""Clients ride through a shard restart: a real `servers.shard` process under
BSP is SIGKILLed mid-run and started again on the same address; the clients'
resend / re-register path carries on from the restored clocks and BSP step,
and the final parameters are exactly the BSP trajectory (no clock lost or
applied twice)."""
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import torch

from conftest import kill_tree, spawn, wait_for, write_config
from psgd.config import load_config
from psgd.launcher import free_ports
from psgd.sharding import layout_for_module
from psgd.tasks import build_model, load_task
from workers.client import PSClient

STEPS = 40
LR = 0.125


def grad(rank: int, clock: int, numel: int) -> torch.Tensor:
    return torch.full((numel,), (rank + 1) * (clock % 3 + 1) / 64.0)


def events(run_dir):
    path = run_dir / "events" / "server-0.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def start_shard(config, run_dir):
    proc = spawn([sys.executable, "-m", "servers.shard", str(config), "--shard", "0", "--run-dir", str(run_dir)],
                 stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    n_ready = sum(e["event"] == "ready" for e in events(run_dir))
    assert wait_for(lambda: sum(e["event"] == "ready" for e in events(run_dir)) > n_ready or proc.poll() is not None,
                    timeout=60)
    assert proc.poll() is None, "shard did not start"
    return proc


@pytest.mark.timeout(120)
def test_bsp_clients_ride_through_a_killed_shard(tmp_path):
    port = free_ports("127.0.0.1", 1)[0]
    config = write_config(tmp_path / "c.yaml",
                          cluster={"servers": [f"127.0.0.1:{port}"], "workers": 2, "timeout_s": 30.0},
                          consistency={"mode": "bsp"}, optimizer={"name": "sgd", "lr": LR},
                          task={"model": "linear", "dataset": "synthetic"},
                          checkpoint={"every_updates": 7, "every_s": 0})
    cfg = load_config(config)
    model = build_model(cfg, load_task(cfg))
    layout = layout_for_module(model, 1)
    init = layout.flatten([p.detach() for p in model.parameters()])[0]
    numel = layout.shard_sizes[0]
    run_dir = tmp_path / "run"
    shard = start_shard(config, run_dir)
    clients = [PSClient(cfg.cluster.servers, layout, rank=r, heartbeat_s=None, request_timeout_s=0.5,
                        max_retries=200) for r in range(2)]
    errors = []

    def train(client):
        try:
            client.register()
            while client.clock < STEPS:
                client.push_pull([grad(client.rank, client.clock, numel)])
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=train, args=(c,)) for c in clients]
    try:
        for t in threads:
            t.start()
        assert wait_for(lambda: min(c.clock for c in clients) >= 12, timeout=60)
        os.kill(shard.pid, signal.SIGKILL)
        shard.wait()
        shard = start_shard(config, run_dir)
        for t in threads:
            t.join(timeout=90)
        assert not errors, errors
        final = clients[0].pull()[0].clone()
        stats = clients[0].stats()[0]
    finally:
        for c in clients:
            c.close()
        kill_tree(shard)
    resumed = [e for e in events(run_dir) if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed[0]["snapshot_version"] >= 7
    assert stats["version"] == STEPS  # one BSP step per clock, none repeated or lost
    expected = init.double().clone()
    for clock in range(STEPS):
        expected -= LR * (grad(0, clock, numel).double() + grad(1, clock, numel).double()) / 2
    torch.testing.assert_close(final.double(), expected, rtol=0, atol=1e-5)
    assert sum(c.resends for c in clients) > 0  # they really had to retry
