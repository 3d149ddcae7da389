"""Key files: loadable by ZeroMQ, secrets created 0600 (never wider, not even
for a moment), and no overwrite without force."""
from __future__ import annotations

import os
import stat

import pytest
import zmq.auth

from psgd.wire.keys import files as keyfiles
from psgd.wire.keys.files import KeyFileExists, generate_key_files


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_generated_keys_load_and_secrets_are_private(tmp_path):
    files = generate_key_files(tmp_path, zmq.curve_keypair, clients=2)
    names = sorted(p.relative_to(tmp_path).as_posix() for p in files)
    assert names == sorted(["server.key", "server.key_secret", "client.key", "client.key_secret",
                            "client-1.key", "client-1.key_secret", "authorized/client.key",
                            "authorized/client-1.key"])
    pub, sec = zmq.auth.load_certificate(tmp_path / "server.key_secret")
    assert len(pub) == 40 and len(sec) == 40
    assert zmq.auth.load_certificate(tmp_path / "server.key") == (pub, None)
    assert all(mode(p) == 0o600 for p in files if p.name.endswith("_secret"))


def test_secret_is_created_with_its_final_mode(tmp_path, monkeypatch):
    seen = []
    real_open = os.open

    def recording_open(path, flags, mode=0o777, *a, **kw):
        if str(path).endswith("_secret"):
            seen.append((flags & os.O_CREAT != 0, flags & os.O_EXCL != 0, mode))
        return real_open(path, flags, mode, *a, **kw)
    monkeypatch.setattr(keyfiles.os, "open", recording_open)
    old = os.umask(0)  # even with no umask the file never exists with a wider mode
    try:
        generate_key_files(tmp_path, zmq.curve_keypair)
    finally:
        os.umask(old)
    assert seen == [(True, True, 0o600)] * 2
    assert mode(tmp_path / "server.key_secret") == 0o600


def test_refuses_to_overwrite_without_force(tmp_path):
    generate_key_files(tmp_path, zmq.curve_keypair)
    before = (tmp_path / "server.key_secret").read_bytes()
    with pytest.raises(KeyFileExists) as err:
        generate_key_files(tmp_path, zmq.curve_keypair)
    assert "server.key" in str(err.value) and "--force" in str(err.value)
    assert (tmp_path / "server.key_secret").read_bytes() == before
    os.chmod(tmp_path / "server.key_secret", 0o644)
    generate_key_files(tmp_path, zmq.curve_keypair, force=True)
    assert (tmp_path / "server.key_secret").read_bytes() != before
    assert mode(tmp_path / "server.key_secret") == 0o600
