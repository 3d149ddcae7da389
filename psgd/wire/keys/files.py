"""CurveZMQ key files written safely: secrets are 0600 from the moment they
exist, and nothing is overwritten without asking.

The files use ZeroMQ's certificate format (what `zmq.auth.load_certificate`
reads). pyzmq's own writer opens them with the default mode and only a
later chmod would tighten it, leaving a window where any local user can
read a secret key; here each file is created with os.open and its mode.
The key pairs themselves come from the caller (the transport, which alone
imports zmq, passes zmq.curve_keypair).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

__all__ = ["KeyFileExists", "KeyPairMaker", "write_key_pair", "generate_key_files", "SERVER_KEY", "AUTHORIZED_DIR"]

# Makes one (public, secret) Z85-encoded CurveZMQ key pair.
KeyPairMaker = Callable[[], tuple[bytes, bytes]]

SERVER_KEY = "server"
AUTHORIZED_DIR = "authorized"


class KeyFileExists(FileExistsError):
    def __init__(self, path: Path):
        self.path = Path(path)
        super().__init__(f"{path} already exists; pass --force to replace the keys in that directory")


def _certificate(public: str, secret: str = "") -> str:
    kind = "Secret" if secret else "Public"
    lines = [f"#   ZeroMQ CURVE {kind} Certificate (made by psgd keys generate)",
             "#   Exchange securely, or use a secure mechanism to verify the contents" if not secret else
             "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.",
             "", "metadata", "curve", f'    public-key = "{public}"']
    if secret:
        lines.append(f'    secret-key = "{secret}"')
    return "\n".join(lines) + "\n"


def _create(path: Path, text: str, mode: int, force: bool) -> Path:
    if force:
        path.unlink(missing_ok=True)  # a new inode: an old file's looser mode is not inherited
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise KeyFileExists(path) from None
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def write_key_pair(directory: Path, name: str, make_pair: KeyPairMaker, force: bool = False) -> tuple[Path, Path]:
    """DIR/NAME.key (public, 0644) and DIR/NAME.key_secret (0600)."""
    public, secret = (k.decode() for k in make_pair())
    d = Path(directory)
    secret_path = _create(d / f"{name}.key_secret", _certificate(public, secret), 0o600, force)
    public_path = _create(d / f"{name}.key", _certificate(public), 0o644, force)
    return public_path, secret_path


def generate_key_files(directory, make_pair: KeyPairMaker, clients: int = 1, force: bool = False) -> list[Path]:
    """A server key pair, `clients` client key pairs and DIR/authorized/ with the
    client public keys. Refuses (KeyFileExists) to replace any existing key file
    unless `force`; then nothing has been written."""
    d = Path(directory)
    names = [SERVER_KEY] + ["client" if k == 0 else f"client-{k}" for k in range(clients)]
    if not force:
        for name in names:
            for path in (d / f"{name}.key", d / f"{name}.key_secret", d / AUTHORIZED_DIR / f"{name}.key"):
                if path.exists():
                    raise KeyFileExists(path)
    (d / AUTHORIZED_DIR).mkdir(parents=True, exist_ok=True)
    if force:  # keys of clients no longer made must not stay authorised
        for old in (d / AUTHORIZED_DIR).glob("*.key"):
            old.unlink()
    written = []
    for name in names:
        public, secret = write_key_pair(d, name, make_pair, force)
        written += [public, secret]
        if name != SERVER_KEY:
            written.append(Path(shutil.copyfile(public, d / AUTHORIZED_DIR / public.name)))
    return written
