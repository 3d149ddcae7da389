"""The Ray role zygote: its key, its client side and its leaving, in this process (no
process started: tests/e2e/test_ray_two_nodes.py runs it for real)."""
import fcntl
import os
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from psgd.orchestrate.ray import zygote
from psgd.orchestrate.ray.zygote import fork_role, zygote_key, zygote_socket

GONE_PID = 2 ** 22 + 12345  # above Linux's pid_max: no process has it


@pytest.fixture
def package(tmp_path):
    """A stand-in for psgd's source files."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    return tmp_path / "pkg"


def test_one_socket_per_node_named_by_a_digest(package):
    key = zygote_key("node-1", package)
    assert key == zygote_key("node-1", package) != zygote_key("node-2", package)
    path = zygote_socket(key)
    assert path.parent.parent == Path(tempfile.gettempdir()) and path.parent.name == f"psgd-zygote-{key}"


def test_rays_per_job_variables_keep_the_zygote_and_other_variables_part_it(package, monkeypatch):
    key = zygote_key("node-1", package)
    monkeypatch.setenv("RAY_JOB_ID", "7f000000")  # differs by run
    assert zygote_key("node-1", package) == key
    monkeypatch.setenv("PSGD_TEST_ZYGOTE_VARIABLE", "1")  # a role could read it at import
    assert zygote_key("node-1", package) != key


def test_an_edited_source_file_gets_a_zygote_of_its_own(package):
    key = zygote_key("node-1", package)
    stat = (package / "a.py").stat()
    os.utime(package / "a.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert zygote_key("node-1", package) != key


def test_a_command_that_is_not_a_module_run_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match=r"-m MODULE"):
        fork_role("c" * 32, ["psgd/cli.py", "worker"], tmp_path / "log", {}, tmp_path / "config.yaml")
    assert not zygote_socket(zygote_key("c" * 32)).parent.exists()


def test_a_socket_directory_others_may_enter_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    place = zygote_socket(zygote_key("d" * 32)).parent
    place.mkdir(mode=0o755)
    place.chmod(0o755)
    with pytest.raises(RuntimeError, match="not this user's alone"):
        fork_role("d" * 32, ["-m", "psgd.cli", "worker"], tmp_path / "log", {}, tmp_path / "config.yaml")
    assert sorted(place.iterdir()) == []  # nothing asked, nothing started


def test_an_idle_zygote_waits_for_a_starter_holding_the_lock_then_leaves_no_trace(tmp_path, monkeypatch):
    monkeypatch.setattr(zygote, "IDLE_EXIT_S", 0.1)
    monkeypatch.setattr(zygote, "POLL_S", 0.02)
    monkeypatch.delenv("RAY_RAYLET_PID", raising=False)  # not in a Ray worker
    path = tmp_path / "z" / "sock"
    path.parent.mkdir(mode=0o700)
    lock = open(path.parent / "lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)  # a RoleHost starting or greeting it
    serving = threading.Thread(target=zygote.serve, args=(path,), daemon=True)
    serving.start()
    while not path.exists():  # bound first, before its imports
        serving.join(0.01)
    zygote._ask(path, {"op": "hello", "host": GONE_PID})  # a RoleHost that is gone at once
    serving.join(0.5)
    assert serving.is_alive() and path.exists()  # idle long enough, but not while the lock is held
    assert zygote._ask(path, {"op": "poll", "pid": GONE_PID}) == {"code": -signal.SIGKILL}
    lock.close()
    serving.join(5)
    assert not serving.is_alive() and not path.parent.exists()


def test_an_idle_zygote_whose_raylet_is_gone_leaves_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(zygote, "POLL_S", 0.02)  # IDLE_EXIT_S stays a minute
    monkeypatch.setenv("RAY_RAYLET_PID", str(GONE_PID))  # a local instance shut down with its run
    path = tmp_path / "z" / "sock"
    path.parent.mkdir(mode=0o700)
    serving = threading.Thread(target=zygote.serve, args=(path,), daemon=True)
    serving.start()
    serving.join(5)
    assert not serving.is_alive() and not path.parent.exists()
