"""One owner per run directory: the lock, its refusal naming the holder, hand-started
roles sharing it, and the ownership rule."""
import errno
import fcntl
import os
import stat

import pytest

from psgd.runtime.run_lock import LOCK_FILE, RoleLock, RunDirLock, RunDirRefused, _personal_group


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


@pytest.mark.skipif(not _personal_group(os.getegid(), os.geteuid()), reason="this user has no personal group")
def test_group_writable_is_accepted_where_the_group_is_the_owners_personal_one(tmp_path):
    os.chown(tmp_path, -1, os.getegid())
    for mode in (0o775, 0o2775):  # umask 002 with user-private groups
        os.chmod(tmp_path, mode)
        RunDirLock(tmp_path).acquire().release()
        RoleLock(tmp_path, "server", 0).acquire().release()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another group needs root")
def test_group_writable_by_a_shared_group_is_refused_even_with_setgid(tmp_path):
    os.chown(tmp_path, -1, 4243)
    for mode in (0o775, 0o2775):
        os.chmod(tmp_path, mode)
        with pytest.raises(RunDirRefused, match=f"writable by group id 4243 \\(mode {mode:o}\\).*chmod g-w"):
            RunDirLock(tmp_path).acquire()
        with pytest.raises(RunDirRefused, match="writable by group id 4243"):
            RoleLock(tmp_path, "server", 0).acquire()
    os.chmod(tmp_path, 0o2755)  # the group may read, not write
    RunDirLock(tmp_path).acquire().release()


def test_a_group_is_personal_only_when_it_is_the_owners_own_and_lists_nobody_else(monkeypatch):
    import grp
    import pwd
    me = pwd.struct_passwd(("ann", "x", 1000, 1000, "", "/home/ann", "/bin/sh"))
    groups = {1000: grp.struct_group(("ann", "x", 1000, [])), 1001: grp.struct_group(("ann", "x", 1001, [])),
              100: grp.struct_group(("users", "x", 100, ["ann", "bob"])),
              1002: grp.struct_group(("ann", "x", 1002, ["bob"]))}
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: me)
    monkeypatch.setattr(grp, "getgrgid", lambda gid: groups[gid])
    assert _personal_group(1000, 1000)
    assert not _personal_group(100, 1000)   # a shared group
    assert not _personal_group(1001, 1000)  # named like the user, but not their primary group
    assert not _personal_group(4244, 1000)  # a group the system cannot name


def test_a_run_directory_psgd_makes_is_never_group_writable(tmp_path):
    from psgd.config import load_config
    from psgd.orchestrate.job import make_run_dir
    old = os.umask(0o002)
    try:
        made = make_run_dir(load_config(None, []), str(tmp_path / "out"))
        RoleLock(tmp_path / "role-made", "server", 0).acquire().release()
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "role-made").stat().st_mode) == 0o755


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
