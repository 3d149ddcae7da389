"""psgd.bench.shaped_net: hosts in network namespaces whose links really run at
the stated rate, and that leave nothing behind."""
import json
import subprocess
import sys

import pytest
from conftest import kill_tree, psgd_cmd, spawn, write_config

from psgd.bench.netns import NetnsError
from psgd.bench.shaped_net import LinkShape, ShapedStar, shaping_supported, tbf_args
from psgd.config import load_config
from psgd.tasks import build_model, task_shape

pytestmark = pytest.mark.e2e

RECEIVE = """
import socket, sys
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, port)); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
got = 0
while got < n:
    chunk = c.recv(1 << 16)
    if not chunk:
        break
    got += len(chunk)
c.sendall(b"k")
print(got, flush=True)
"""
SEND = """
import socket, sys, time
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = socket.create_connection((ip, port), timeout=60)
t0 = time.perf_counter()
c.sendall(b"x" * n)
assert c.recv(1) == b"k"
print(time.perf_counter() - t0)
"""


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture(autouse=True)
def _needs_shaping():
    reason = shaping_supported()
    if reason is not None:
        pytest.skip(reason)


def _transfer_s(net: ShapedStar, nbytes: int) -> float:
    port = 7400
    receiver = spawn(net.command("b", [sys.executable, "-c", RECEIVE, net.ip("b"), str(port), str(nbytes)]),
                     stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        sent = subprocess.run(net.command("a", [sys.executable, "-c", SEND, net.ip("b"), str(port), str(nbytes)]),
                              capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        assert int(receiver.stdout.readline()) == nbytes
        return float(sent.stdout)
    finally:
        kill_tree(receiver)


@pytest.mark.timeout(90)
def test_a_transfer_over_a_10_mbit_link_takes_at_least_its_bytes_over_the_rate():
    nbytes, shape = 2_000_000, LinkShape(rate_mbit=10)
    with ShapedStar(["a", "b"], shape) as net:
        took = _transfer_s(net, nbytes)
        names = [net.hub, *net.namespaces.values()]
        assert all(ns in _namespaces() for ns in names)
    # The bucket lets one burst through at once; everything else leaves at the rate.
    burst = int(tbf_args(shape)[tbf_args(shape).index("burst") + 1])
    assert took >= (nbytes - burst) * 8 / 10e6, took  # 1.6 s at 10 Mb/s, whatever the load
    assert not any(ns in _namespaces() for ns in names)  # removed on exit


@pytest.mark.timeout(60)
def test_a_delay_needs_netem_and_the_kernel_says_whether_it_has_it():
    shape = LinkShape(rate_mbit=100, latency_ms=20)
    star = ShapedStar(["a", "b"], shape)
    try:
        with star as net:
            took = _transfer_s(net, 1)  # connect, one byte, one reply: several one-way delays
            assert took >= 2 * shape.latency_ms / 1e3, took
    except NetnsError as exc:
        assert "netem" in str(exc) and "\n" not in str(exc)
    assert not any(ns in _namespaces() for ns in [star.hub, *star.namespaces.values()])


def test_a_link_shape_refuses_nonsense():
    with pytest.raises(ValueError, match="rate_mbit"):
        LinkShape(rate_mbit=0)
    with pytest.raises(ValueError, match="latency_ms"):
        LinkShape(rate_mbit=1, latency_ms=-1)


@pytest.mark.timeout(150)
def test_a_psgd_push_and_pull_over_a_10_mbit_link_take_at_least_their_bytes_over_the_rate(tmp_path):
    """The real system over the testbed: a worker's every step pushes its gradient and pulls
    the parameters (1.2 MB each way) through 10 Mb/s links, so its round trip lasts at least
    both transfers at the rate."""
    shape, port = LinkShape(rate_mbit=10), 7300
    with ShapedStar(["shard", "worker"], shape) as net:
        config = write_config(tmp_path / "config.yaml",
                              cluster={"servers": [f"{net.ip('shard')}:{port}"], "workers": 1},
                              task={"model": "mlp", "dataset": "digits", "batch_size": 32,
                                    "model_args": {"hidden": 512, "depth": 2}},
                              train={"steps_per_worker": 3, "max_time_s": 100, "target_accuracy": None},
                              wire={"shared_memory": "off"}, checkpoint={"enabled": False},
                              run={"name": "test", "seed": 0, "record": False})
        run_dir = tmp_path / "run"
        server = spawn(net.command("shard", psgd_cmd("server", str(config), "--shard", "0", "--run-dir",
                                                     str(run_dir))))
        try:
            worker = subprocess.run(net.command("worker", psgd_cmd("worker", str(config), "--rank", "0",
                                                                   "--run-dir", str(run_dir))),
                                    capture_output=True, text=True, timeout=120)
            assert worker.returncode == 0, worker.stderr
        finally:
            kill_tree(server)
    cfg = load_config(config)
    nbytes = 4 * sum(p.numel() for p in build_model(cfg, task_shape(cfg)).parameters())
    assert nbytes > 1_000_000
    burst = int(tbf_args(shape)[tbf_args(shape).index("burst") + 1])
    steps = [json.loads(line) for line in (run_dir / "events" / "worker-0.jsonl").read_text().splitlines()
             if '"event": "step"' in line]
    assert len(steps) == 3
    for e in steps:  # one push out on the worker's link, the parameters back on the shard's
        assert e["comm_s"] >= 2 * (nbytes - burst) * 8 / 10e6, (e, nbytes)
