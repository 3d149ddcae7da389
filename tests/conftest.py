"""Shared fixtures: small configs, in-process shards on free loopback ports,
launcher runs as real subprocesses, and a session guard that reaps any child
process a test left behind."""
from __future__ import annotations

import gc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import yaml
from support import fork_server

torch.set_num_threads(1)  # the suite shares two cores with the processes it starts

ROOT = Path(__file__).resolve().parents[1]
_SPAWNED: list[subprocess.Popen] = []


pytest_plugins = ["timeout_margin", "process_guard"]  # tests/ is on pythonpath


def load_script(relpath: str):
    """A script under benchmarks/ as a module. Scripts are run as files, not
    installed, so their own folder goes on sys.path for their sibling imports."""
    path = ROOT / relpath
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


FORKABLE = {"stdout", "stderr", "text", "cwd", "start_new_session"}


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    """Start a child process that the session guard will reap if the test does not. A psgd
    command with the suite's own environment is forked from a process that has imported
    torch and psgd (tests/support/fork_server.py): the same `main` in a real process of its
    own session, without seconds of imports per command; anything else is exec'd."""
    kw.setdefault("start_new_session", True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.update(kw.pop("env", {}))
    if (cmd[:3] == psgd_cmd() and set(kw) <= FORKABLE and kw["start_new_session"]
            and not os.environ.get("PSGD_TESTS_EXEC")
            and fork_server.environment_matches(env, fork_server.server().env)):
        proc = fork_server.ForkedCommand(cmd, kw.get("cwd"), env, kw.get("stdout"), kw.get("stderr"),
                                         bool(kw.get("text")))
    else:
        proc = subprocess.Popen(cmd, env=env, **kw)
    _SPAWNED.append(proc)
    return proc


def spawn_forked_with_env(cmd: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    """A psgd command forked from the preloaded server (as `spawn` forks one) with an environment
    of its own: only for variables psgd reads when the command runs, never at import (a
    cluster launcher's SLURM_*, MASTER_ADDR, MASTER_PORT), which the forked `main` sees as a
    fresh interpreter would. `env` is the child's whole environment."""
    assert cmd[:3] == psgd_cmd() and set(kw) <= FORKABLE - {"start_new_session"}, (cmd, kw)
    if os.environ.get("PSGD_TESTS_EXEC"):
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, **kw)
    else:
        proc = fork_server.ForkedCommand(cmd, kw.get("cwd"), env, kw.get("stdout"), kw.get("stderr"),
                                         bool(kw.get("text")))
    _SPAWNED.append(proc)
    return proc


def kill_tree(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.fixture(autouse=True, scope="session")
def reap_children():
    yield
    for proc in _SPAWNED:
        kill_tree(proc)


def write_config(path: Path, **sections) -> Path:
    """A small, fast config; keyword sections are merged over the defaults."""
    cfg = {
        "run": {"name": "test", "seed": 0},
        "cluster": {"servers": 2, "workers": 2, "timeout_s": 5.0, "heartbeat_s": 0.5, "request_timeout_s": 10.0},
        "consistency": {"mode": "asp"},
        "task": {"model": "mlp", "dataset": "digits", "batch_size": 32},
        "optimizer": {"name": "sgd", "lr": 0.1},
        "train": {"steps_per_worker": 60, "max_time_s": 60, "target_accuracy": 0.8},
        "eval": {"every_s": 0.5},
        "workers": {"device": "cpu"},
    }
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def small_config(tmp_path):
    return lambda **sections: write_config(tmp_path / "config.yaml", **sections)


def psgd_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "psgd.cli", *args]


def run_psgd(*args: str, cwd: Path, timeout: float = 140.0) -> tuple[int, str, str]:
    """Run a psgd command to completion as a real process; returns (code, stdout, stderr)."""
    proc = spawn(psgd_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(cwd))
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, stdout, stderr


def launch(config: Path, out: Path, *overrides: str, timeout: float = 90.0) -> tuple[int, str, dict]:
    """Run `psgd launch` to completion; returns (exit code, stderr+stdout, summary)."""
    cmd = psgd_cmd("launch", str(config), "--out", str(out), "--quiet")
    for o in overrides:
        cmd += ["--set", o]
    proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(config.parent))
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError(f"psgd launch did not finish in {timeout}s") from None
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return proc.returncode, output, summary


def read_events(run_dir: Path) -> list[dict]:
    """The run's merged metrics.jsonl."""
    from psgd.runtime.events import read_events as read_jsonl
    return read_jsonl(run_dir / "metrics.jsonl")


class InProcessShards:
    """Real ShardServer loops on loopback ports, each on its own thread."""

    def __init__(self, cfg, params_per_shard, fingerprint):
        from psgd.servers.shard import ShardServer
        self.stop = threading.Event()
        self.servers = [ShardServer(cfg, i, "127.0.0.1:0", p, fingerprint)
                        for i, p in enumerate(params_per_shard)]
        self.addresses = [s.address.replace("tcp://", "") for s in self.servers]
        self.threads = [threading.Thread(target=s.serve, args=(self.stop,), daemon=True) for s in self.servers]
        for t in self.threads:
            t.start()

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)


@pytest.fixture
def shards():
    """Factory: shards(cfg, model) -> InProcessShards serving the model's initial parameters."""
    made = []

    def make(cfg, model):
        from psgd.core.sharding import layout_for_module
        layout = layout_for_module(model, cfg.cluster.num_servers)
        params = layout.flatten([p.detach() for p in model.parameters()])
        s = InProcessShards(cfg, params, layout.fingerprint)
        s.layout = layout
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def wait_for(cond, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return False


# ---- launched runs that a test disturbs (kills, restarts) -------------------------------------
# Fast failure detection: a client resends after 1 s, often enough to outlast a shard restart.
FAST_RETRY = {"request_timeout_s": 1.0, "max_retries": 60, "timeout_s": 5.0, "heartbeat_s": 0.5}


def start_launch(config, out, *extra):
    cmd = psgd_cmd("launch", str(config), "--out", str(out), "--quiet", *extra)
    return spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(config.parent))


def finish(proc, timeout):
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError(f"psgd launch did not finish in {timeout}s") from None
    return proc.returncode, output


def worker_steps(run_dir, rank):
    path = run_dir / "events" / f"worker-{rank}.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"event": "step"' in line)


def pid_of(run_dir, role, index):
    entries = json.loads((run_dir / "processes.json").read_text())
    return next(e["pid"] for e in entries if e["role"] == role and e["index"] == index)


def final_versions(events):
    """Each shard's version in its last stats event."""
    latest = {}
    for e in events:
        if e.get("event") == "server_stats":
            latest[e["index"]] = e["version"]
    return latest


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Ask a child to stop (SIGINT for a launcher, SIGTERM for a role), then make sure it has."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    kill_tree(proc)


def run_in_threads(work, ranks, timeout: float = 60.0) -> list:
    """work(rank) on one thread per rank; returns the exceptions they raised."""
    errors = []

    def guarded(rank):
        try:
            work(rank)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)
    threads = [threading.Thread(target=guarded, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return errors


# ---- filesystems that fail on purpose ----------------------------------------------------------
@contextmanager
def tmpfs(path, size, read_only=False):
    path.mkdir()
    opts = f"size={size}" + (",ro" if read_only else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def one_clear_line(output: str) -> str:
    """The one line that says what failed (besides `psgd launch`'s usual "run directory:" line
    and its hint on how to continue a run that has checkpoints)."""
    lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith("run directory: ")
             and "continue this run with" not in ln]
    assert "Traceback" not in output, output
    assert len(lines) == 1, output
    return lines[0]


def worker_clock(run_dir, rank=0):
    """The clock of a live run's worker `rank` after its latest step (0 before any)."""
    path = run_dir / "events" / f"worker-{rank}.jsonl"
    if not path.exists():
        return 0
    events = [json.loads(ln) for ln in path.read_text().splitlines() if ln.endswith("}")]
    clocks = [e["clock"] for e in events if e["event"] == "step"]
    return clocks[-1] if clocks else 0



@pytest.hookimpl(trylast=True)  # after tests/e2e/conftest.py has marked its items
def pytest_collection_modifyitems(items):
    """Heaviest files first (tests/support/file_weights.py), so that two xdist workers
    (`--dist loadfile`, no reordering by test count) finish together: a heavy file
    scheduled last would run alone at the end."""
    from support.file_weights import order
    order(items)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave the objects the run made out of the collections Python runs while it shuts down:
    with torch and a suite's garbage they took seconds in every process (each xdist worker and
    the controller, which waits for them), ~5 s against ~0.5 s after tests/unit/wire. Every
    object stays alive as before; atexit handlers still run."""
    gc.freeze()


def pytest_runtest_logreport(report):
    """Each test phase's seconds into $PSGD_TEST_DURATIONS when set (file_weights.py sums them)."""
    from support.file_weights import record
    record(report)
