"""Free TCP ports, for the launcher, cluster runs, benchmarks and tests."""
from __future__ import annotations

import socket

__all__ = ["free_ports"]


def free_ports(host: str, n: int) -> list[int]:
    """n distinct ports free on `host` right now (all held open until chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
