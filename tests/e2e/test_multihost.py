"""Multi-host by role, on one machine: two Linux network namespaces joined by a
veth pair are two hosts with their own addresses. Both shards serve on host A,
four workers and the evaluator run on host B, and `psgd eval` from host B reads
the trained model across the link."""
import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest
from conftest import kill_tree, psgd_cmd, spawn, write_config

# A private range that exists only inside the namespaces this test creates.
HOST_A, HOST_B = "10.77.7.1", "10.77.7.2"


PROBE = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)\n"
         "    print('connected')\nexcept ConnectionRefusedError:\n    print('refused')")


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


@pytest.fixture
def two_hosts():
    """(run-in-A, run-in-B) command prefixes; the namespaces and their veth
    pair are removed afterwards, also when the test fails."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("the `ip` tool (iproute2) is not installed")
    token = secrets.token_hex(3)  # parallel runs must not collide; interface names stay <= 15 chars
    ns_a, ns_b = f"psgd-a-{token}", f"psgd-b-{token}"
    made = []
    try:
        for ns in (ns_a, ns_b):
            r = _ip("netns", "add", ns)
            if r.returncode != 0:
                pytest.skip(f"cannot create a network namespace here: {r.stderr.strip()}")
            made.append(ns)
        steps = [
            ("link", "add", f"va{token}", "netns", ns_a, "type", "veth", "peer", "name", f"vb{token}", "netns", ns_b),
            ("-n", ns_a, "addr", "add", f"{HOST_A}/24", "dev", f"va{token}"),
            ("-n", ns_b, "addr", "add", f"{HOST_B}/24", "dev", f"vb{token}"),
            ("-n", ns_a, "link", "set", f"va{token}", "up"),
            ("-n", ns_b, "link", "set", f"vb{token}", "up"),
            ("-n", ns_a, "link", "set", "lo", "up"),
            ("-n", ns_b, "link", "set", "lo", "up"),
        ]
        for step in steps:
            r = _ip(*step)
            assert r.returncode == 0, f"ip {' '.join(step)}: {r.stderr}"
        yield ["ip", "netns", "exec", ns_a], ["ip", "netns", "exec", ns_b]
    finally:
        for ns in made:  # deleting a namespace also deletes its end of the veth pair
            _ip("netns", "del", ns)


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_shards_on_host_a_workers_on_host_b(two_hosts, tmp_path):
    on_a, on_b = two_hosts
    steps, workers = 200, 4
    config = write_config(tmp_path / "config.yaml",
                          cluster={"servers": [f"{HOST_A}:7000", f"{HOST_A}:7001"], "workers": workers},
                          train={"steps_per_worker": steps, "max_time_s": 90, "target_accuracy": 0.9},
                          eval={"every_s": 1.0})
    run_dir = tmp_path / "run"
    role = lambda *args: psgd_cmd(*args, "--run-dir", str(run_dir))  # noqa: E731
    servers = [spawn(on_a + role("server", str(config), "--shard", str(i))) for i in range(2)]
    evaluator = spawn(on_b + role("evaluator", str(config)))
    procs = [spawn(on_b + role("worker", str(config), "--rank", str(r))) for r in range(workers)]
    try:
        codes = [p.wait(timeout=110) for p in procs]
        assert codes == [0] * workers, "a worker failed; see the events under " + str(run_dir)
        # Host B's loopback is its own: the workers reached the shards across the link.
        probe = subprocess.run(on_b + [sys.executable, "-c", PROBE, "127.0.0.1", "7000"],
                               capture_output=True, text=True, timeout=30)
        assert probe.stdout.strip() == "refused", probe.stdout + probe.stderr

        result = subprocess.run(on_b + psgd_cmd("eval", str(config), "--json"), capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        measured = json.loads(result.stdout)
        assert measured["accuracy"] >= 0.9, measured
        # A worker that registers after others have started continues from their
        # clock, so count the pushes each worker reports; every one reached both shards.
        pushed = sum(json.loads(line)["steps"] for r in range(workers)
                     for line in (run_dir / "events" / f"worker-{r}.jsonl").read_text().splitlines()
                     if '"event": "done"' in line)
        assert steps <= pushed <= workers * steps  # the first worker to register does all its steps
        assert measured["updates"] == pushed and measured["versions"] == [pushed, pushed]

        evaluator.terminate()  # final evaluation and model.pt, while the servers still serve
        assert evaluator.wait(timeout=60) == 0
        for s in servers:
            s.terminate()
        assert [s.wait(timeout=30) for s in servers] == [0, 0]
    finally:
        for p in [*procs, evaluator, *servers]:
            kill_tree(p)

    assert (run_dir / "config.yaml").is_file()  # the hand-started roles left the config there
    collected = subprocess.run(psgd_cmd("collect", str(run_dir)), capture_output=True, text=True, timeout=60)
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout.startswith(f"collected {run_dir}: asp accuracy ") and collected.stdout.count("\n") == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["worker_steps"] == pushed and summary["total_updates"] == pushed
    assert summary["missing_events"] == []
    assert summary["final_test_accuracy"] == pytest.approx(measured["accuracy"])
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    bound = sorted(e["address"] for e in events if e["role"] == "server" and e["event"] == "ready")
    assert bound == [f"tcp://{HOST_A}:7000", f"tcp://{HOST_A}:7001"]
    assert (run_dir / "model.pt").is_file()
