"""One owner per run directory: the lock, its refusal naming the holder, hand-started
roles sharing it, and the ownership rule."""
import errno
import fcntl
import os

import pytest

from psgd.runtime.run_lock import LOCK_FILE, RoleLock, RunDirLock, RunDirRefused


def test_a_second_holder_is_refused_naming_the_first_and_the_lock_ends_with_its_holder(tmp_path):
    first = RunDirLock(tmp_path).acquire()
    with pytest.raises(RunDirRefused, match=f"pid {os.getpid()} on "):
        RunDirLock(tmp_path).acquire()
    first.release()
    with RunDirLock(tmp_path):  # free again
        assert (tmp_path / LOCK_FILE).exists()


def test_a_directory_anybody_may_write_is_refused(tmp_path):
    os.chmod(tmp_path, 0o777)
    with pytest.raises(RunDirRefused, match="writable by every user"):
        RunDirLock(tmp_path).acquire()

    os.chmod(tmp_path, 0o775)  # group-writable (umask 002) is this user's choice
    RunDirLock(tmp_path).acquire().release()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_directory_of_another_user_is_refused(tmp_path):
    os.chown(tmp_path, 4242, -1)
    with pytest.raises(RunDirRefused, match="belongs to user id 4242"):
        RunDirLock(tmp_path).acquire()


def test_hand_started_roles_of_one_run_share_the_directory_and_keep_a_launcher_out(tmp_path):
    shard0, shard1 = RoleLock(tmp_path, "server", 0).acquire(), RoleLock(tmp_path, "server", 1).acquire()
    worker = RoleLock(tmp_path, "worker", 0).acquire()
    assert shard0.held and shard1.held and worker.held
    with pytest.raises(RunDirRefused, match="in use by hand-started psgd roles") as err:
        RunDirLock(tmp_path).acquire()
    assert f"server 0 (pid {os.getpid()} on " in str(err.value) and "worker 0 (pid" in str(err.value)
    shard1.release()
    with pytest.raises(RunDirRefused) as err:
        RunDirLock(tmp_path).acquire()
    assert "server 1" not in str(err.value)  # an ended role is not named
    shard0.release()
    worker.release()
    RunDirLock(tmp_path).acquire().release()  # every role gone: the directory is free


def test_a_role_is_refused_where_a_launcher_holds_the_directory(tmp_path):
    launcher = RunDirLock(tmp_path).acquire()
    with pytest.raises(RunDirRefused, match=f"in use by a psgd launcher \\(pid {os.getpid()} on "):
        RoleLock(tmp_path, "server", 0).acquire()
    launcher.release()
    with RoleLock(tmp_path, "server", 0) as role:
        assert role.held


def test_the_same_role_and_index_twice_is_refused_naming_the_first(tmp_path):
    first = RoleLock(tmp_path, "server", 0).acquire()
    with pytest.raises(RunDirRefused, match=f"already has server 0 running \\(pid {os.getpid()} on "):
        RoleLock(tmp_path, "server", 0).acquire()
    RoleLock(tmp_path, "server", 1).acquire().release()  # another shard is fine
    first.release()
    RoleLock(tmp_path, "server", 0).acquire().release()


def test_a_role_starts_unguarded_where_the_filesystem_cannot_lock(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(fcntl, "flock", no_flock)
    role = RoleLock(tmp_path / "new", "worker", 3).acquire()
    assert not role.held and (tmp_path / "new").is_dir()
    role.release()
