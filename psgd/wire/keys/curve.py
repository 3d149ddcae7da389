"""Which CurveZMQ keys a process uses, from the `security` config section.

Relative key paths are resolved against the config file's directory, so a
run started from anywhere finds the same keys. Returns None when curve is off.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from psgd.config import Config
from psgd.wire.transport import CurveKeys, client_keys, server_keys

__all__ = ["server_curve", "client_curve", "keys_dir"]


def _resolve(cfg: Config, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(cfg.base_dir) / p


def keys_dir(cfg: Config) -> Path:
    return _resolve(cfg, cfg.security.keys_dir)


def server_curve(cfg: Config) -> Optional[CurveKeys]:
    """The shard's key pair and authorised client keys. Raises TransportError if missing."""
    return server_keys(keys_dir(cfg)) if cfg.security.curve else None


def client_curve(cfg: Config) -> Optional[CurveKeys]:
    """This client's key pair plus the server's public key. Raises TransportError if missing."""
    if not cfg.security.curve:
        return None
    key = _resolve(cfg, cfg.security.client_key) if cfg.security.client_key else None
    return client_keys(keys_dir(cfg), key)
