"""Hosts on links of a stated rate and delay: network namespaces on a bridge,
each joined by a veth pair shaped with Linux traffic control.

    with ShapedStar(["shard0", "worker0", "worker1"], LinkShape(rate_mbit=1000)) as net:
        spawn(net.command("shard0", ["psgd", "server", ...]))   # serves on net.ip("shard0")

Every host is a namespace of its own, with one veth pair to a hub namespace
whose bridge joins them all, so each host has its own link as in a cluster:
a shard's link is shared by every worker that talks to it, and a worker's by
every shard it talks to. On each veth, a token bucket (tbf) caps what leaves
at the link's rate: on the host's end its uplink, on the hub's end its
downlink. A delay (netem) goes in front of the bucket where the kernel has
netem; where it does not, asking for one is an error that says so.

Needs root, iproute2 (ip, tc) and a kernel with veth, bridge and tbf.
Everything is removed on exit; a reaper process removes it too if this one
dies first (psgd/bench/netns_reaper.py). Names carry a random tag, so
parallel runs do not collide.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from psgd.bench.netns import NetnsError
from psgd.bench.netns_reaper import REAPER, remove

__all__ = ["LinkShape", "ShapedStar", "shaping_supported", "tbf_args"]

_MTU_BYTES = 1514
BURST_S = 1e-3  # a token bucket's depth, in seconds at its rate (tbf_args says why)
_SUBNET = "10.252"  # a private /16 that exists only inside these namespaces


@dataclass(frozen=True)
class LinkShape:
    """One host link, the same in each direction."""
    rate_mbit: float            # tbf rate, megabits per second
    latency_ms: float = 0.0     # one-way delay (netem), milliseconds

    def __post_init__(self):
        if not self.rate_mbit > 0:
            raise ValueError(f"rate_mbit: must be > 0, got {self.rate_mbit}")
        if not self.latency_ms >= 0:
            raise ValueError(f"latency_ms: must be >= 0, got {self.latency_ms}")

    @property
    def bytes_per_s(self) -> float:
        return self.rate_mbit * 1e6 / 8


def tbf_args(shape: LinkShape) -> list[str]:
    """The token bucket of one direction. Burst: 1 ms at the rate, at least two
    full frames (tbf drops what exceeds its bucket). A deeper bucket lets more of
    each message through at once (4 ms at 100 Mb/s is half of a 104 KB push); a
    shallower one loses tokens whenever the qdisc's timer fires late, which on a
    loaded machine is often: 20 MB over a 1 Gb/s link with a 100 us bucket ran
    at 90 Mb/s; over 100 Mb/s a 1 ms bucket gave 80 Mb/s, a 4 ms one 94 (2 cores
    shared with other jobs). The queue holds half a second at the rate (at least 1 MB), so a saturated
    link queues, as a switch port does, instead of dropping what TCP resends."""
    rate = shape.bytes_per_s
    burst = max(2 * _MTU_BYTES, int(rate * BURST_S))
    limit = max(1 << 20, int(rate * 0.5))
    return ["tbf", "rate", f"{int(rate * 8)}bit", "burst", str(burst), "limit", str(limit)]


def shaping_supported() -> Optional[str]:
    """None if shaped namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, traffic control)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2)"
    return None


def _run(*argv: str) -> None:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {res.stderr.strip()}")


class ShapedStar:
    """`hosts` (names of at most 200 hosts), each a namespace at `ip(name)`, on
    links shaped by `shape` (None: unshaped veth). A context manager."""

    def __init__(self, hosts: Sequence[str], shape: Optional[LinkShape], tag: Optional[str] = None):
        if len(set(hosts)) != len(hosts) or not 0 < len(hosts) <= 200:
            raise ValueError(f"hosts: 1 to 200 distinct names, got {list(hosts)}")
        self.hosts, self.shape = list(hosts), shape
        self.tag = tag or secrets.token_hex(3)
        self.hub = f"psgd-{self.tag}-hub"
        self.namespaces = {h: f"psgd-{self.tag}-{i}" for i, h in enumerate(self.hosts)}
        self._ips = {h: f"{_SUBNET}.{int(self.tag, 16) % 250}.{i + 2}" for i, h in enumerate(self.hosts)}
        self._made: list[str] = []
        self._reaper: Optional[subprocess.Popen] = None

    def ip(self, host: str) -> str:
        return self._ips[host]

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """argv run inside `host`'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def __enter__(self) -> "ShapedStar":
        reason = shaping_supported()
        if reason is not None:
            raise NetnsError(reason)
        try:
            self._make()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _make(self) -> None:
        _run("ip", "netns", "add", self.hub)
        self._made.append(self.hub)
        self._start_reaper()
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            ns = self.namespaces[host]
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            hub_end = f"h{self.tag}{i}"  # at most 15 characters
            _run("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", hub_end, "netns", self.hub)
            _run("ip", "-n", self.hub, "link", "set", hub_end, "master", "br0")
            _run("ip", "-n", self.hub, "link", "set", hub_end, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self._ips[host]}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            if self.shape is not None:
                self._shape(ns, "eth0")         # the host's uplink
                self._shape(self.hub, hub_end)  # its downlink

    def _shape(self, ns: str, dev: str) -> None:
        tc = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
        if self.shape.latency_ms > 0:
            res = subprocess.run([*tc, "root", "handle", "1:", "netem", "delay", f"{self.shape.latency_ms}ms"],
                                 capture_output=True, text=True, timeout=30)
            if res.returncode != 0:
                raise NetnsError(f"a link delay needs the netem qdisc, which this kernel lacks "
                                 f"(CONFIG_NET_SCH_NETEM): tc says {res.stderr.strip()!r}")
            _run(*tc, "parent", "1:", "handle", "2:", *tbf_args(self.shape))
        else:
            _run(*tc, "root", *tbf_args(self.shape))

    def _start_reaper(self) -> None:
        """Removes the namespaces (and every process in them) if this process dies first."""
        self._reaper = subprocess.Popen([sys.executable, REAPER, str(os.getpid()), *self._all_namespaces()],
                                        start_new_session=True, stdin=subprocess.DEVNULL)

    def _all_namespaces(self) -> list[str]:
        return [self.hub, *self.namespaces.values()]

    def __exit__(self, *exc) -> None:
        remove(list(reversed(self._made)), [])
        self._made = []
        if self._reaper is not None:  # its work is done
            self._reaper.terminate()
            self._reaper.wait(timeout=10)
            self._reaper = None
