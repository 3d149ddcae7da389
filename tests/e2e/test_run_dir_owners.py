"""One owner per run directory, with real processes: a launcher owns its directory
alone, hand-started roles of one run share theirs, and each side is refused in
one line naming the other while it lives."""
import os
import signal

import pytest
from conftest import (
    one_clear_line,
    psgd_cmd,
    run_psgd,
    spawn,
    start_launch,
    stop,
    wait_for,
    worker_steps,
    write_config,
)

from psgd.runtime.ports import free_ports
from psgd.runtime.role import EXIT_NO_RETRY
from psgd.runtime.run_lock import RunDirLock

pytestmark = pytest.mark.e2e


def _torchrun_env(rank: int, world: int) -> dict:
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_ports("127.0.0.1", 1)[0]), "TORCHELASTIC_RUN_ID": "owners"}


def _ready(run_dir, role, index) -> bool:
    path = run_dir / "events" / f"{role}-{index}.jsonl"
    return path.exists() and '"event": "ready"' in path.read_text()


@pytest.mark.timeout(120)
def test_hand_started_roles_are_refused_in_a_directory_a_live_launcher_owns(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", train={"steps_per_worker": 100000, "max_time_s": 40},
                       eval={"enabled": False}, workers={"device_ms": 20})  # runs until stopped: few cores used
    out = tmp_path / "run"
    launcher = start_launch(cfg, out)
    try:
        assert wait_for(lambda: worker_steps(out, 0) >= 20, timeout=60), "the run never got going"
        shard_events = (out / "events" / "server-0.jsonl").stat().st_size
        # A config it could start with on its own: addresses of its own, free now.
        hand = write_config(tmp_path / "hand.yaml", cluster={"servers": [f"127.0.0.1:{p}" for p in free_ports(
            "127.0.0.1", 2)]}, eval={"enabled": False})
        code, stdout, stderr = run_psgd("server", str(hand), "--shard", "0", "--run-dir", str(out), cwd=tmp_path,
                                        timeout=60)
        line = one_clear_line(stdout + stderr)
        assert code == EXIT_NO_RETRY and line.startswith(f"psgd server: {out} is in use by a psgd launcher "
                                                         f"(pid {launcher.pid} on "), line
        # A rank of a torchrun/srun job is a hand-started role too.
        proc = spawn(psgd_cmd("run", str(cfg), "--run-dir", str(out)), env=_torchrun_env(0, 4), cwd=str(tmp_path),
                     stdout=-1, stderr=-1, text=True)
        stdout, stderr = proc.communicate(timeout=60)
        line = one_clear_line(stdout + stderr)
        assert proc.returncode == EXIT_NO_RETRY and line.startswith(f"psgd run: {out} is in use by a psgd "
                                                                    f"launcher (pid {launcher.pid} on "), line
        # The run went on untouched: its shard's events were not truncated, its workers still train.
        assert (out / "events" / "server-0.jsonl").stat().st_size >= shard_events
        steps = worker_steps(out, 0)
        assert wait_for(lambda: worker_steps(out, 0) > steps + 20, timeout=30)
    finally:
        stop(launcher, sig=signal.SIGINT, timeout=30)


@pytest.mark.timeout(120)
def test_hand_started_servers_of_one_run_coexist_and_keep_a_launcher_and_twins_out(tmp_path):
    ports = free_ports("127.0.0.1", 2)
    cfg = write_config(tmp_path / "c.yaml", cluster={"servers": [f"127.0.0.1:{p}" for p in ports], "workers": 2})
    out = tmp_path / "run"
    servers = [spawn(psgd_cmd("server", str(cfg), "--shard", str(i), "--run-dir", str(out)), cwd=str(tmp_path))
               for i in range(2)]
    try:
        assert wait_for(lambda: _ready(out, "server", 0) and _ready(out, "server", 1), timeout=60), \
            "the hand-started shards did not both start"
        code, stdout, stderr = run_psgd("launch", str(cfg), "--out", str(out), "--quiet", cwd=tmp_path, timeout=60)
        line = one_clear_line(stdout + stderr)
        assert code == 1 and "in use by hand-started psgd roles" in line, line
        assert f"server 0 (pid {servers[0].pid} on " in line and f"server 1 (pid {servers[1].pid} on " in line, line
        code, stdout, stderr = run_psgd("server", str(cfg), "--shard", "0", "--run-dir", str(out), cwd=tmp_path,
                                        timeout=60)
        line = one_clear_line(stdout + stderr)
        assert code == EXIT_NO_RETRY and f"already has server 0 running (pid {servers[0].pid} on " in line, line
        assert all(s.poll() is None for s in servers), "a refused start disturbed the running shards"
    finally:
        for s in servers:
            stop(s, timeout=20)
    assert [s.returncode for s in servers] == [0, 0]
    RunDirLock(out).acquire().release()  # both gone: the directory is free again
    assert sorted(os.listdir(out / "locks")) == ["server-0.lock", "server-1.lock"]


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another group needs root")
def test_a_run_directory_a_shared_group_may_write_is_refused_before_anything_starts(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", eval={"enabled": False})
    out = tmp_path / "shared"
    out.mkdir()
    os.chown(out, -1, 4245)  # a group that is nobody's personal one
    os.chmod(out, 0o2775)    # a setgid team directory, umask 002
    for args in (("launch", str(cfg), "--out", str(out), "--quiet"),
                 ("server", str(cfg), "--shard", "0", "--run-dir", str(out))):
        code, stdout, stderr = run_psgd(*args, cwd=tmp_path, timeout=50)
        line = one_clear_line(stdout + stderr)
        assert code in (1, EXIT_NO_RETRY) and f"{out} is writable by group id 4245 (mode 2775)" in line, line
    assert os.listdir(out) == []  # nothing was written into it
