"""CurveZMQ keys: made by `generate_keys` (written safely by psgd.wire.keys.files), loaded
for a server or a client, and checked by a ZAP authenticator thread (one per process) that
admits only the clients whose public key is in the server's authorised directory."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from psgd.wire.keys.files import AUTHORIZED_DIR, SERVER_KEY, generate_key_files
from psgd.wire.transport.context import TransportError, zmq_context

__all__ = ["CurveKeys", "authenticate_clients", "client_keys", "curve_round_trip", "generate_keys", "server_keys"]


@dataclass(frozen=True)
class CurveKeys:
    """One side's CurveZMQ keys (Z85 bytes). A server also names the directory
    of authorised client public keys; a client names the server's public key."""
    public: bytes
    secret: bytes
    server_public: bytes
    authorized_dir: Optional[Path] = None


def generate_keys(directory, clients: int = 1, force: bool = False) -> list[Path]:
    """Make DIR/server.key(_secret), `clients` client key pairs DIR/client[-k].key(_secret)
    and copy their public keys into DIR/authorized/. Returns the files written.
    Refuses to replace existing keys unless `force` (see keys/files.py)."""
    return generate_key_files(directory, zmq.curve_keypair, clients, force)


def _load(path: Path, need_secret: bool) -> tuple[bytes, bytes]:
    if not Path(path).is_file():
        raise TransportError(f"key file not found: {path} (make keys with `psgd keys generate DIR`)")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (ValueError, OSError) as exc:
        raise TransportError(f"cannot read key file {path}: {exc}") from None
    if need_secret and secret is None:
        raise TransportError(f"{path} holds no secret key (use the *.key_secret file)")
    return public, secret


def server_keys(directory) -> CurveKeys:
    d = Path(directory)
    public, secret = _load(d / f"{SERVER_KEY}.key_secret", need_secret=True)
    if not (d / AUTHORIZED_DIR).is_dir():
        raise TransportError(f"no authorised client keys: {d / AUTHORIZED_DIR} is missing")
    return CurveKeys(public, secret, public, d / AUTHORIZED_DIR)


def client_keys(directory, key_file=None) -> CurveKeys:
    d = Path(directory)
    server_public, _ = _load(d / f"{SERVER_KEY}.key", need_secret=False)
    public, secret = _load(Path(key_file) if key_file else d / "client.key_secret", need_secret=True)
    return CurveKeys(public, secret, server_public)


_AUTH: dict[int, ThreadAuthenticator] = {}


def authenticate_clients(authorized_dir: Path) -> None:
    """Start (once per process) the ZAP handler that admits only authorised client keys."""
    auth = _AUTH.get(os.getpid())
    if auth is None:
        auth = _AUTH[os.getpid()] = ThreadAuthenticator(zmq_context())
        auth.start()
    auth.configure_curve(domain="*", location=str(authorized_dir))


def curve_round_trip(timeout_ms: int = 5000) -> str:
    """An encrypted, authenticated request and reply on loopback with fresh key pairs;
    returns "" when it worked, else why not (libzmq without CURVE, or the error)."""
    if not zmq.has("curve"):
        return "libzmq was built without CURVE"
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    ctx = zmq.Context()
    try:
        rep, req = ctx.socket(zmq.REP), ctx.socket(zmq.REQ)
        for sock in (rep, req):
            sock.linger = 0
            sock.rcvtimeo = sock.sndtimeo = timeout_ms
        rep.curve_server, rep.curve_secretkey, rep.curve_publickey = True, server_secret, server_public
        port = rep.bind_to_random_port("tcp://127.0.0.1")
        req.curve_serverkey, req.curve_publickey, req.curve_secretkey = server_public, client_public, client_secret
        req.connect(f"tcp://127.0.0.1:{port}")
        req.send(b"ping")
        rep.send(rep.recv()[::-1])
        return "" if req.recv() == b"gnip" else "the encrypted reply was wrong"
    except zmq.ZMQError as exc:
        return f"an encrypted round trip failed: {exc}"
    finally:
        ctx.destroy(linger=0)
