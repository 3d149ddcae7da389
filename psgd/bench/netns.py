"""Two hosts on one machine: a pair of Linux network namespaces joined by a
veth pair, for measuring and testing psgd across hosts (TCP over a real
interface, no loopback shortcut, no shared memory: the server side runs in
pid and mount namespaces of its own).

Needs root and iproute2. Everything is created on entry and deleted on exit
(deleting a namespace deletes its end of the veth pair, and with it the
other end); names carry this process's pid so parallel runs do not collide,
and the addresses are a private /30 used only inside the two namespaces.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Optional, Sequence

__all__ = ["NetnsPair", "netns_supported", "NetnsError"]


class NetnsError(RuntimeError):
    pass


def netns_supported() -> Optional[str]:
    """None if namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {res.stderr.strip()}")


class NetnsPair:
    """`with NetnsPair() as net:` two namespaces, `net.server_ns` at
    `net.server_ip` and `net.client_ns` at `net.client_ip`."""

    def __init__(self, tag: Optional[str] = None, subnet: int = 0):
        tag = tag or str(os.getpid())
        self.server_ns, self.client_ns = f"psgd-{tag}-s", f"psgd-{tag}-c"
        self._veth = (f"ps{tag[-8:]}s", f"ps{tag[-8:]}c")  # interface names: at most 15 characters
        octet = 16 + (int(tag) % 200 if tag.isdigit() else subnet)
        self.server_ip, self.client_ip = f"10.251.{octet}.1", f"10.251.{octet}.2"
        self._made: list[str] = []

    def __enter__(self) -> "NetnsPair":
        reason = netns_supported()
        if reason is not None:
            raise NetnsError(reason)
        try:
            for ns in (self.server_ns, self.client_ns):
                _ip("netns", "add", ns)
                self._made.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            vs, vc = self._veth
            _ip("link", "add", vs, "netns", self.server_ns, "type", "veth", "peer", "name", vc, "netns",
                self.client_ns)
            for ns, dev, ip in ((self.server_ns, vs, self.server_ip), (self.client_ns, vc, self.client_ip)):
                _ip("-n", ns, "addr", "add", f"{ip}/30", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def command(self, ns: str, argv: Sequence[str], private_shm: bool = True) -> list[str]:
        """argv run inside namespace `ns`; with `private_shm`, as on another host:
        in a pid namespace of its own (its /proc shows no process of this host, so
        no shared-memory segment can be reached through /proc/PID/fd) and on a
        /dev/shm of its own (a fresh tmpfs in a private mount namespace)."""
        if not private_shm:
            return ["ip", "netns", "exec", ns, *argv]
        script = 'mount -t tmpfs -o size=256m,mode=1777 psgd-shm /dev/shm && exec "$@"'
        return ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "--pid", "--fork",
                "--kill-child", "--mount-proc", "sh", "-c", script, "sh", *argv]

    def __exit__(self, *exc) -> None:
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._made = []
