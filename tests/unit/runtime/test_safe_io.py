"""Failed writes raise one line naming the path and leave no temp file."""
from __future__ import annotations

import errno
import os

import pytest

from psgd.runtime.files import atomic_write
from psgd.runtime.safe_io import describe_os_error


def test_atomic_write_replaces_the_file(tmp_path):
    path = tmp_path / "summary.json"
    atomic_write(path, "one")
    atomic_write(path, "two")
    assert path.read_text() == "two" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory_gives_one_line(tmp_path):
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o555)
    with pytest.raises(OSError) as err:
        atomic_write(tmp_path / "ro" / "x.json", "{}")
    line = str(describe_os_error(err.value, tmp_path / "ro" / "x.json"))
    assert "\n" not in line and "ro" in line and "Permission denied" in line


def test_write_failure_mid_file_removes_the_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    atomic_write(path, "good")
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError) as err:
        atomic_write(path, "new")
    monkeypatch.setattr(os, "fsync", real_fsync)
    line = str(describe_os_error(err.value, path))
    assert str(path) in line and "No space left on device" in line
    assert path.read_text() == "good" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_describe_prefers_the_errors_own_filename():
    e = describe_os_error(OSError(errno.EROFS, os.strerror(errno.EROFS), "/x/y"), "/other")
    assert str(e) == "cannot write /x/y: Read-only file system" and str(e.path) == "/x/y"
