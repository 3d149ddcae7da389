"""One owner per run directory: the lock, its refusal naming the holder, and the
ownership rule."""
import os

import pytest

from psgd.runtime.run_lock import LOCK_FILE, RunDirLock, RunDirRefused


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
