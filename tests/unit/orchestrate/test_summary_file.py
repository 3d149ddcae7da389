"""summary.json survives a full disk: the reserved bytes take the final summary in place."""
from __future__ import annotations

import errno
import json
import os

from psgd.orchestrate.records import summary_file
from psgd.orchestrate.records.summary_file import RESERVED_BYTES, reserve_summary, write_summary


def test_reserved_summary_is_valid_json_and_holds_its_size(tmp_path):
    path = tmp_path / "summary.json"
    reserve_summary(path)
    assert json.loads(path.read_text()) == {"status": "running"}
    assert path.stat().st_size == RESERVED_BYTES


def test_final_summary_is_written_in_place_when_the_disk_is_full(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    reserve_summary(path)

    def full(p, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(summary_file, "atomic_write", full)
    summary = {"status": "failed", "failure": "cannot write x: No space left on device (disk full)"}
    assert write_summary(path, summary) is None
    assert json.loads(path.read_text()) == summary
    assert path.stat().st_size == RESERVED_BYTES  # no new space needed
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_unwritable_summary_is_reported_in_one_line(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"  # never reserved (e.g. a read-only directory)

    def refused(p, text):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    monkeypatch.setattr(summary_file, "atomic_write", refused)
    reason = write_summary(path, {"status": "failed"})
    assert reason == f"cannot write {path}: Read-only file system"
