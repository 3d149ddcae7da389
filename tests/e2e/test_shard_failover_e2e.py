"""A dead shard costs the time it takes to come back, not cluster.request_timeout_s:
a real `psgd server` is SIGKILLed while a client pushes with a 30 s request timeout
and no retries; the client sees the connection drop, waits without using up
attempts, and resends the moment the restarted shard accepts the connection.
Every acknowledged push is applied exactly once across the restart."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from conftest import kill_tree, spawn, wait_for, write_config

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient

LR = 0.5


def ready_count(run_dir) -> int:
    path = run_dir / "events" / "server-0.jsonl"
    if not path.exists():
        return 0
    return sum(json.loads(ln)["event"] == "ready" for ln in path.read_text().splitlines())


def start_shard(config, run_dir) -> subprocess.Popen:
    before = ready_count(run_dir)
    proc = spawn([sys.executable, "-m", "psgd.cli", "server", str(config), "--shard", "0", "--run-dir", str(run_dir)],
                 stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    assert wait_for(lambda: ready_count(run_dir) > before or proc.poll() is not None, timeout=60)
    assert proc.poll() is None, "the shard did not start"
    return proc


@pytest.mark.timeout(180)  # two shard start-ups, seconds each on a loaded machine
def test_a_restarted_shard_is_resent_to_within_a_second_with_nothing_lost_or_doubled(tmp_path):
    port, = free_ports("127.0.0.1", 1)
    config = write_config(tmp_path / "c.yaml", cluster={"servers": [f"127.0.0.1:{port}"], "workers": 1,
                                                        "timeout_s": 60.0},
                          consistency={"mode": "asp"}, optimizer={"name": "sgd", "lr": LR},
                          task={"model": "linear", "dataset": "synthetic"}, checkpoint={"every_updates": 5})
    cfg = load_config(config)
    layout = layout_for_module(build_model(cfg, load_task(cfg)), 1)
    run_dir = tmp_path / "run"
    shard = start_shard(config, run_dir)
    # No resend at the timeout in this test's life: only the connection events can bring the push through.
    client = PSClient(cfg.cluster.servers, layout, rank=0, heartbeat_s=None, request_timeout_s=600.0, max_retries=0)
    acked_at: list[float] = []
    errors: list = []
    stop = threading.Event()

    def push(clock: int) -> torch.Tensor:
        return torch.full((layout.shard_sizes[0],), (clock % 5 + 1) / 64.0)

    def train():
        try:
            client.register()
            while not stop.is_set():
                client.push([push(client.clock)])
                acked_at.append(time.monotonic())
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=train)
    try:
        thread.start()
        assert wait_for(lambda: len(acked_at) >= 20, timeout=30)
        os.kill(shard.pid, signal.SIGKILL)
        shard.wait()
        killed_at_ack = len(acked_at)
        time.sleep(0.5)  # down for a while: the client must not give up (it has no retries)
        shard = start_shard(config, run_dir)
        back = time.monotonic()
        assert wait_for(lambda: len(acked_at) > killed_at_ack + 5 or errors, timeout=20), "no push after the restart"
        stop.set()
        thread.join(timeout=20)
        assert not errors, errors
        first_after = next(t for t in acked_at[killed_at_ack:] if t > back)
        final = client.pull()[0].clone()
        version = client.stats()[0]["version"]
    finally:
        stop.set()
        client.close()
        kill_tree(shard)
    assert first_after - back < 1.0  # the ready event lands after the bind; the resend follows the handshake
    assert client.failovers >= 1 and client.resends == 0
    assert version == len(acked_at) == client.clock  # each acknowledged push applied once, none lost
    expected = layout.flatten([p.detach() for p in build_model(cfg, load_task(cfg)).parameters()])[0].double()
    for clock in range(len(acked_at)):
        expected -= LR * push(clock).double()
    torch.testing.assert_close(final.double(), expected, rtol=0, atol=1e-5)
