"""`psgd ctl RUN_DIR set key=value ...`: change a live run at one clock on every shard.

Two phases over the shards' CONTROL requests, each carrying the run token:
1. prepare: every shard checks the change and holds pulls from its next
   unanswered clock on, and answers with that clock;
2. commit: the largest of those clocks becomes the effective clock E, and
   every shard takes the change into force from E (which ends its hold).
No shard has answered a pull at E or beyond before it commits, so every
gradient and every pull of a clock below E ran under the old settings and
all from E on under the new ones. If a shard refuses the prepare, the others
are told to abort and nothing changes.

One controller at a time: a controller takes RUN_DIR/ctl.lock for its change
(a second one on the same machine is refused at once), and every hold carries
its controller's id, so a controller elsewhere can neither commit nor abort
another's hold: two at once never leave the shards on different settings.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from psgd.config import ConfigError, load_config
from psgd.config.modes import Role
from psgd.core.live_settings import ControlError, parse_change
from psgd.runtime.token import read_run_token
from psgd.wire import protocol as P
from psgd.wire.keys.curve import client_curve
from psgd.wire.requests import RemoteError, RequestFailed, RequestTracker
from psgd.wire.transport import ShardConnections, TransportError

__all__ = ["ControlFailed", "ControlResult", "parse_assignments", "server_addresses", "set_live", "show_live",
           "live_status", "watch_live"]


class ControlFailed(RuntimeError):
    """The change was not made (or, if the message says so, made on some shards only)."""


@dataclass(frozen=True)
class ControlResult:
    effective_clock: int
    shards: list[dict]           # each shard's setting in force from the effective clock


def parse_assignments(items: list[str]) -> dict[str, str]:
    """['consistency.staleness=4', ...] -> {key: value}; raises ControlFailed naming the item."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ControlFailed(f"expected key=value, got {item!r}")
        if key.strip() in out:
            raise ControlFailed(f"{key.strip()} is set twice")
        out[key.strip()] = value.strip()
    if not out:
        raise ControlFailed("nothing to set: give key=value")
    return out


def server_addresses(run_dir: Path) -> list[str]:
    """The live shards' addresses, in shard order, from RUN_DIR/processes.json."""
    path = Path(run_dir) / "processes.json"
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        raise ControlFailed(f"{path} not found: is the run still live?") from None
    except (OSError, ValueError) as exc:
        raise ControlFailed(f"cannot read {path}: {exc}") from None
    servers = sorted((e["index"], e["address"]) for e in entries if e.get("role") == Role.SERVER and e.get("address"))
    if not servers:
        raise ControlFailed(f"{path} lists no server (an all-reduce run has nothing to control)")
    return [addr for _, addr in servers]


class _Shards:
    def __init__(self, run_dir: Path, timeout_s: float):
        self.run_dir = Path(run_dir)
        try:
            self.cfg = load_config(self.run_dir / "config.yaml")
        except (ConfigError, OSError) as exc:
            raise ControlFailed(f"cannot read {self.run_dir / 'config.yaml'}: {exc}") from None
        token = read_run_token(self.run_dir)
        if token is None:
            raise ControlFailed(f"no run token in {self.run_dir} (run.token): only the run's owner may change it")
        self.token = token
        addresses = server_addresses(self.run_dir)
        try:
            self.conns = ShardConnections(addresses, curve=client_curve(self.cfg))
        except TransportError as exc:
            raise ControlFailed(str(exc)) from None
        self.rpc = RequestTracker(self.conns, timeout_s, max_retries=0)
        self.n = len(addresses)
        self.owner = secrets.token_hex(8)  # this controller's holds are its own

    def call(self, op: str, changes: dict, clock: int = 0) -> dict:
        return self.rpc.call({s: P.encode(P.Control(req=self.rpc.next_id(), op=op, token=self.token, clock=clock,
                                                    settings=changes, owner=self.owner)) for s in range(self.n)},
                             interruptible=False)

    def close(self) -> None:
        self.conns.close()


@contextlib.contextmanager
def _one_controller(run_dir: Path):
    """Hold RUN_DIR/ctl.lock for a change; the kernel drops it if this process dies."""
    path = Path(run_dir) / "ctl.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ControlFailed(f"cannot open {path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise ControlFailed(f"another psgd ctl (pid {holder}) is changing this run; nothing changed") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def set_live(run_dir, changes: dict[str, str], timeout_s: float = 5.0) -> ControlResult:
    with _one_controller(Path(run_dir)):
        return _set_live(run_dir, changes, timeout_s)


def _set_live(run_dir, changes: dict[str, str], timeout_s: float) -> ControlResult:
    shards = _Shards(run_dir, timeout_s)
    try:
        for key, value in changes.items():  # refuse a bad change before any shard holds a pull
            try:
                parse_change(key, value, shards.cfg.consistency.mode)
            except ControlError as exc:
                raise ControlFailed(exc.reason) from None
        try:
            prepared = shards.call("prepare", changes)
        except (RemoteError, RequestFailed) as exc:
            _abort(shards)
            raise ControlFailed(f"not changed: {exc}") from None
        clock = max(rec.clock for rec, _ in prepared.values())
        try:
            committed = shards.call("commit", changes, clock)
        except (RemoteError, RequestFailed) as exc:
            _abort(shards)
            raise ControlFailed(f"commit at clock {clock} failed ({exc}); other shards may have applied it: "
                                f"check with `psgd ctl {run_dir} show`") from None
        return ControlResult(clock, [committed[s][0].detail for s in range(shards.n)])
    finally:
        shards.close()


def _abort(shards: _Shards) -> None:
    """Release this controller's holds (a shard held by another controller keeps its hold)."""
    try:
        shards.call("abort", {})
    except (RemoteError, RequestFailed):
        pass  # a shard that cannot be reached, or held by another controller, keeps that hold until it ends


def live_status(run_dir, timeout_s: float = 1.0) -> list[dict]:
    """Every shard's clocks, parked pulls, last heartbeats and wait totals now
    (servers/service.py ShardService.status): a read, no hold, nothing changed."""
    shards = _Shards(run_dir, timeout_s)
    try:
        replies = shards.call("status", {})
    except (RemoteError, RequestFailed) as exc:
        raise ControlFailed(str(exc)) from None
    finally:
        shards.close()
    return [replies[s][0].detail for s in range(len(replies))]


def watch_live(run_dir, timeout_s: float = 1.0, interval_s: float = 0.5):
    """The live view (psgd.orchestrate.live_view) from two looks `interval_s` apart."""
    import time

    from psgd.orchestrate.live_view import live_view
    first, t0 = live_status(run_dir, timeout_s), time.monotonic()
    time.sleep(interval_s)
    second = live_status(run_dir, timeout_s)
    return live_view(second, first, time.monotonic() - t0)


def show_live(run_dir, timeout_s: float = 5.0) -> list[dict]:
    """Every shard's settings in force, its changes so far and the bounds its pulls ran under."""
    shards = _Shards(run_dir, timeout_s)
    try:
        replies = shards.call("show", {})
    except (RemoteError, RequestFailed) as exc:
        raise ControlFailed(str(exc)) from None
    finally:
        shards.close()
    return [replies[s][0].detail for s in range(len(replies))]
