"""Small runtime helpers: atomic writes, free ports, the run token."""
import os
import socket
import stat

import pytest

from psgd.runtime.files import atomic_write
from psgd.runtime.ports import free_ports
from psgd.runtime.token import TOKEN_FILE, new_run_token, read_run_token


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")
    atomic_write(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_atomic_write_that_fails_removes_its_temp_file(tmp_path):
    path = tmp_path / "missing-dir" / "x.json"
    with pytest.raises(FileNotFoundError):
        atomic_write(path, "text")
    assert list(tmp_path.iterdir()) == []


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports("127.0.0.1", 3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_run_token_is_private_and_read_back(tmp_path):
    token = new_run_token(tmp_path)
    mode = stat.S_IMODE(os.stat(tmp_path / TOKEN_FILE).st_mode)
    assert mode == 0o600
    assert read_run_token(tmp_path) == token and len(token) == 32
    assert new_run_token(tmp_path) != token  # a new run gets a new secret
    assert read_run_token(tmp_path / "nowhere") is None and read_run_token(None) is None


def test_atomic_write_takes_bytes_or_a_writer_keeps_the_old_file_and_sets_the_mode(tmp_path):
    path, old = tmp_path / "snap.pt", tmp_path / "snap.prev.pt"
    atomic_write(path, b"\x00first")
    atomic_write(path, lambda f: f.write(b"second"), keep_old_as=old, sync_dir=True)
    assert (path.read_bytes(), old.read_bytes()) == (b"second", b"\x00first")
    atomic_write(tmp_path / "secret", "s", mode=0o600)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    with pytest.raises(ZeroDivisionError):
        atomic_write(path, lambda f: f.write(b"half") and 1 / 0)  # a writer that fails midway
    assert path.read_bytes() == b"second" and sorted(p.name for p in tmp_path.iterdir()) == [
        "secret", "snap.prev.pt", "snap.pt"]
