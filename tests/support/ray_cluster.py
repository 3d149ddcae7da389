"""A two-node Ray cluster on one machine, for tests: two network namespaces
joined by a veth pair are two hosts with their own addresses; `ray start
--head` runs in the first (node A, custom resource `node_a`) and `ray start
--address` in the second (node B, `node_b`).

Node B also gets a /tmp and /dev/shm of its own (a private mount namespace),
as another host would: what its roles write there reaches the launcher only
through Ray. Node A shares the filesystem with the test, so the launcher (which
must run in a namespace to reach both nodes: `cluster.on_a(argv)`) and its run
directory live there.

A launcher on node A is forked (`psgd_on_a`) from the suite's fork server run there
(tests/support/fork_server.py) with Ray imported too: not a fresh interpreter that
imports torch, psgd and Ray again, about 5 s of CPU a launch on two shared cores.

Everything is created by `start()` and removed by `close()`: every process in
either namespace is SIGKILLed by pid (`ip netns pids`; never `ray stop`, which
matches process names machine-wide and would stop other people's Ray), then
the namespaces are deleted. `close()` returns what it could not remove. Should
the test process die without closing (killed outright, or pytest-timeout's
thread method), a reaper started with the cluster does the same
(netns_reaper.py).
"""
from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from support import fork_server

from psgd.bench.netns_reaper import REAPER, kill_all, ns_pids, remove

BIN = Path(sys.executable).parent
RAY_PORT = 6379
# Small nodes for a 2-core machine: Ray's logical CPUs are not cores, and the object store is unused.
NODE_CPUS = 4
OBJECT_STORE_BYTES = 80 * 1024 * 1024
# No log monitor: psgd's driver does not take its workers' output (log_to_driver=False), and
# each node's monitor is one more Python process polling on two shared cores.
NODE_FLAGS = [f"--num-cpus={NODE_CPUS}", f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats",
              "--include-log-monitor=false"]
# No idle Python workers started ahead of use, at a node's start or a driver's: each is an
# interpreter importing Ray (about 1 s of CPU), and every psgd role is an actor of its own anyway.
NODE_ENV = {"RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0"}
# The head runs without the autoscaler's monitor (--no-monitor: a Python process polling the
# cluster): these nodes are fixed. A killed node is declared dead after about period x threshold
# (Ray's default is about 15 s).
HEAD_ENV = {**NODE_ENV, "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
            "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "1000"}


def lent_past_tmp() -> list[str]:
    """This checkout and its Python environment, where they live under /tmp (a CI clone may)."""
    places = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(), BIN.resolve()}
    under = sorted(str(p) for p in places if p.is_relative_to("/tmp") and p != Path("/tmp"))
    return [p for p in under if not any(p.startswith(q + "/") for q in under if q != p)]


def unsupported() -> Optional[str]:
    """None where namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"needs the `{tool}` tool"
    if lent_past_tmp() and not Path("/mnt").is_dir():
        return "this checkout lives under /tmp, and node B needs /mnt to lend it past its own /tmp"
    if shutil.which("ray", path=str(BIN)) is None:
        return "needs Ray in this environment (pip install 'psgd[ray]')"
    return None


ZYGOTE_MODULE = b"psgd.orchestrate.ray.zygote"


class SetupFailed(RuntimeError):
    pass


# The fork server with the Ray launcher imported as well (importing Ray starts no thread).
FORKS_ON_A = """
import sys
sys.path.insert(0, sys.argv[1])
import fork_server
import psgd.orchestrate.ray.launcher
fork_server.serve(sys.argv[2])
"""


class _ForksOnA(fork_server._Server):
    """The suite's fork server, run on node A (its network and the cluster's HOME)."""

    def __init__(self, cluster: "TwoNodeRay"):
        self.path = str(cluster.home / "forks.sock")
        self.env = {**fork_server.START_ENV, "HOME": str(cluster.home)}
        # From the cluster's home: from the checkout's root, `-c` would import the psgd/ source folder.
        self.proc = subprocess.Popen(
            cluster.on_a([sys.executable, "-c", FORKS_ON_A, str(Path(fork_server.__file__).parent), self.path]),
            env=fork_server.START_ENV, cwd=str(cluster.home), stdin=subprocess.DEVNULL, start_new_session=True)


def _run(argv: Sequence[str], timeout: float = 30, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                         env=None if env is None else {**os.environ, **env})
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise SetupFailed(f"{' '.join(argv[:6])} ...: exit {res.returncode}: {' | '.join(tail)}")
    return res


class TwoNodeRay:
    """`start()` then `address` ("10.201.N.1:6379"), `ip_a`, `ip_b`, `on_a(argv)`,
    `on_b(argv)`, `kill_node_b()`; `close()` at the end."""

    def __init__(self):
        self.token = secrets.token_hex(3)  # interface names stay within 15 characters
        self.ns_a, self.ns_b = f"psgd-ra-{self.token}", f"psgd-rb-{self.token}"
        octet = 16 + int(self.token, 16) % 200  # only inside these namespaces: any private /24 would do
        self.ip_a, self.ip_b = f"10.201.{octet}.1", f"10.201.{octet}.2"
        self.address = f"{self.ip_a}:{RAY_PORT}"
        self.temp_a = Path(f"/tmp/psgd-rt-{self.token}")  # short: Ray's socket paths live under it
        # A home of their own: a ~/.ray/auth_token left by another Ray on this machine makes a
        # joining node present a token the head never asked for, and the join is refused.
        self.home = Path(f"/tmp/psgd-rh-{self.token}")
        self._made: list[str] = []
        self._reaper: Optional[subprocess.Popen] = None
        self._forks: Optional[_ForksOnA] = None

    # ---- commands on a node ------------------------------------------------
    def on_a(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns_a, "env", f"HOME={self.home}", *argv]

    def on_b(self, argv: Sequence[str]) -> list[str]:
        """Node B's processes see a /tmp and /dev/shm of their own, and the software (this
        checkout and its environment) where it is, as another host with the same image would,
        even when the checkout itself lives under /tmp."""
        script = ("mount -t tmpfs -o size=512m,mode=1777 psgd-tmp /tmp && "
                  "mount -t tmpfs -o size=256m,mode=1777 psgd-shm /dev/shm && exec \"$@\"")
        keep = lent_past_tmp()
        if keep:  # the old /tmp, stashed on /mnt (private to this mount namespace), lends them back
            lend = " && ".join(f"mkdir -p {shlex.quote(p)} && mount --bind {shlex.quote('/mnt/' + p[5:])} "
                               f"{shlex.quote(p)}" for p in keep)
            script = script.replace(" && exec", f" && {lend} && umount -l /mnt && exec")
            script = "mount --bind /tmp /mnt && " + script
        return ["ip", "netns", "exec", self.ns_b, "env", f"HOME={self.home}", "unshare", "--mount",
                "--propagation", "private", "sh", "-c", script, "sh", *argv]

    def psgd_on_a(self, args: Sequence[str], cwd: Path, env: Optional[dict] = None,
                  **pipes) -> fork_server.ForkedCommand:
        """`psgd ARGS` on node A, forked from the fork server there (its own session, as
        `conftest.spawn` starts one); `pipes`: stdout, stderr and text, as for Popen."""
        full = {**fork_server.START_ENV, **(env or {}), "HOME": str(self.home)}
        return fork_server.ForkedCommand([sys.executable, "-m", "psgd.cli", *args], str(cwd), full, via=self._forks,
                                         **pipes)

    def pids(self, ns: str) -> list[int]:
        return ns_pids(ns)

    def node_b_tmp(self) -> Path:
        """Node B's own /tmp, as seen from here: through its raylet's root, which lives as long as node B."""
        for pid in self.pids(self.ns_b):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
                    return Path(f"/proc/{pid}/root/tmp")
            except OSError:
                continue  # a process that has just exited
        raise SetupFailed("node B has no raylet")

    def node_b_up(self) -> bool:
        """Whether anything runs on node B (nothing does after kill_node_b)."""
        return bool(self.pids(self.ns_b))

    # ---- lifecycle ---------------------------------------------------------
    def start(self) -> "TwoNodeRay":
        try:
            self.home.mkdir(mode=0o700)
            self._start_reaper()
            self._network()
            self._forks = _ForksOnA(self)  # its imports overlap the nodes' start
            ray = str(BIN / "ray")
            _run(self.on_a([ray, "start", "--head", f"--node-ip-address={self.ip_a}", f"--port={RAY_PORT}",
                            '--resources={"node_a": 8}', "--include-dashboard=false", "--no-monitor",
                            f"--temp-dir={self.temp_a}", *NODE_FLAGS]), timeout=60, env=HEAD_ENV)
            self.start_node_b()
        except BaseException:
            self.close()
            raise
        return self

    def start_node_b(self) -> None:
        """Node B joins the head (again, after kill_node_b: a fresh node with an empty /tmp)."""
        _run(self.on_b([str(BIN / "ray"), "start", f"--address={self.address}", f"--node-ip-address={self.ip_b}",
                        '--resources={"node_b": 8}', "--temp-dir=/tmp/psgd-rt", *NODE_FLAGS]), timeout=60, env=NODE_ENV)

    def _start_reaper(self) -> None:
        """Removes what this cluster made if this process dies before close()."""
        script = REAPER
        self._reaper = subprocess.Popen(
            [sys.executable, str(script), str(os.getpid()), self.ns_a, self.ns_b, "--", str(self.temp_a),
             str(self.home)], stdin=subprocess.DEVNULL, start_new_session=True)  # not in the test's process group

    def _network(self) -> None:
        va, vb = f"vra{self.token}", f"vrb{self.token}"
        for ns in (self.ns_a, self.ns_b):
            _run(["ip", "netns", "add", ns])
            self._made.append(ns)
        _run(["ip", "link", "add", va, "netns", self.ns_a, "type", "veth", "peer", "name", vb, "netns", self.ns_b])
        for ns, dev, ip in ((self.ns_a, va, self.ip_a), (self.ns_b, vb, self.ip_b)):
            _run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # A default route makes the namespace's own address the one Ray finds for this node.
            _run(["ip", "-n", ns, "route", "add", "default", "dev", dev])

    def kill_node_b(self) -> list[int]:
        """SIGKILL every process on node B (its raylet, Ray's workers and psgd's roles)."""
        return kill_all(self.ns_b)

    def close(self) -> list[str]:
        """Stop everything; returns what is left behind (empty when all is gone)."""
        made, self._made = list(reversed(self._made)), []
        zygotes = self._zygote_dirs() if self.ns_a in made else []
        for ns in made:
            kill_all(ns)  # the fork server on node A among them
        if self._forks is not None:
            self._forks.close()  # reaps it
            self._forks = None
        left = [f"processes {self.pids(ns)} in {ns}" for ns in made if self.pids(ns)]
        remove(made, [str(self.temp_a), str(self.home), *zygotes])
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
        left += [f"namespace {ns}" for ns in (self.ns_a, self.ns_b) if ns in listed]
        if self._reaper is not None:  # its work is done
            self._reaper.terminate()
            self._reaper.wait(timeout=10)
            self._reaper = None
        return left

    def _zygote_dirs(self) -> list[str]:
        """The socket directories of the role zygotes on node A (psgd/orchestrate/ray/zygote.py),
        in the /tmp it shares with the test: killed, a zygote leaves its directory behind. (The
        roles it forked show its command line too.)"""
        found = set()
        for pid in self.pids(self.ns_a):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue  # a process that has just exited
            if ZYGOTE_MODULE in argv[:-1]:
                found.add(str(Path(argv[argv.index(ZYGOTE_MODULE) + 1].decode()).parent))
        return sorted(found)


def leftovers(token: str) -> list[str]:
    """Processes anywhere on this machine that mention this cluster's temp dir or
    namespaces (a Ray process that escaped its namespace would)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"psgd-rt-{token}" in cmd or f"psgd-ra-{token}" in cmd or f"psgd-rb-{token}" in cmd:
            found.append(f"{entry.name}: {cmd[:120]}")
    return found
