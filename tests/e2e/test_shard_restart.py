"""Clients ride through shard restarts: both real `psgd.servers.shard` processes of
a BSP run are SIGKILLed mid-run and started again on the same addresses; the
clients' resend / re-register path carries on from the restored clocks and BSP
step, and the final parameters are exactly the BSP trajectory (no clock lost
or applied twice)."""
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
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient

STEPS = 40


LR = 0.125


def grad(rank: int, clock: int, numel: int) -> torch.Tensor:
    return torch.full((numel,), (rank + 1) * (clock % 3 + 1) / 64.0)


def events(run_dir, shard):
    path = run_dir / "events" / f"server-{shard}.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def start_shards(config, run_dir):
    procs = []
    for i in range(2):
        n_ready = sum(e["event"] == "ready" for e in events(run_dir, i))
        procs.append((n_ready, spawn([sys.executable, "-m", "psgd.cli", "server", str(config), "--shard", str(i),
                                      "--run-dir", str(run_dir)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)))
    for i, (n_ready, proc) in enumerate(procs):
        assert wait_for(lambda i=i, n_ready=n_ready, proc=proc: sum(e["event"] == "ready" for e in events(run_dir, i))
                        > n_ready or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, f"shard {i} did not start"
    return [proc for _, proc in procs]


@pytest.mark.timeout(120)
def test_bsp_clients_ride_through_killed_shards(tmp_path):
    ports = free_ports("127.0.0.1", 2)
    config = write_config(tmp_path / "c.yaml",
                          cluster={"servers": [f"127.0.0.1:{p}" for p in ports], "workers": 2, "timeout_s": 30.0},
                          consistency={"mode": "bsp"}, optimizer={"name": "sgd", "lr": LR},
                          task={"model": "linear", "dataset": "synthetic"},
                          checkpoint={"every_updates": 7, "every_s": 0})
    cfg = load_config(config)
    model = build_model(cfg, load_task(cfg))
    layout = layout_for_module(model, 2)
    init = layout.flatten([p.detach() for p in model.parameters()])
    run_dir = tmp_path / "run"
    shards = start_shards(config, run_dir)
    clients = [PSClient(cfg.cluster.servers, layout, rank=r, heartbeat_s=None, request_timeout_s=0.5,
                        max_retries=200) for r in range(2)]
    errors = []

    def train(client):
        try:
            client.register()
            while client.clock < STEPS:
                client.push_pull([grad(client.rank, client.clock, n) for n in layout.shard_sizes])
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=train, args=(c,)) for c in clients]
    try:
        for t in threads:
            t.start()
        assert wait_for(lambda: min(c.clock for c in clients) >= 12, timeout=60)
        for shard in shards:
            os.kill(shard.pid, signal.SIGKILL)
            shard.wait()
        shards = start_shards(config, run_dir)
        for t in threads:
            t.join(timeout=90)
        assert not errors, errors
        final = [t.clone() for t in clients[0].pull()]
        stats = clients[0].stats()
    finally:
        for c in clients:
            c.close()
        for shard in shards:
            kill_tree(shard)
    for i in range(2):
        resumed = [e for e in events(run_dir, i) if e["event"] == "resumed"]
        assert len(resumed) == 1 and resumed[0]["snapshot_version"] >= 7
        assert stats[i]["version"] == STEPS  # one BSP step per clock, none repeated or lost
        n = layout.shard_sizes[i]
        expected = init[i].double().clone()
        for clock in range(STEPS):
            expected -= LR * (grad(0, clock, n).double() + grad(1, clock, n).double()) / 2
        torch.testing.assert_close(final[i].double(), expected, rtol=0, atol=1e-5)
    assert sum(c.resends + c.failovers for c in clients) > 0  # they really had to repeat requests
