"""Replicated shards (`cluster.replicas: R`): primary-backup by log shipping.

Each shard runs as 1 + R processes on its one address. Whichever binds the
address is the primary and serves; the others are backups. A backup keeps a
ShardState equal to the primary's by reading the primary's checkpoint as it is
written (RUN_DIR/checkpoints, servers/checkpoint.py): the newest snapshot, then
every record of its push log as it is appended, applied in the log's order
through the same methods the primary used (`apply_record`).

The ack rule is the checkpoint's: the primary appends a push to its log before
it acknowledges it, so every acknowledged push is in the log a backup reads.
When the primary dies the kernel closes its listening socket, and the backup
that binds the address first (it tries every PROBE_S) becomes the primary: it
reads the log's last records (the dead primary's last acknowledged pushes),
takes over the shard's checkpoint files and serves. Workers' connections to the
address come back at once (psgd.wire.transport.link_watch), they resend what was
outstanding with the same seq, and the state's exactly-once table, rebuilt
from the same log, applies none twice. The launcher restarts the dead process,
which finds the address taken and becomes a backup. The binding itself is the
election: two processes can never both hold the address, and only the holder
writes the checkpoint files.

Cost: R more processes per shard, each holding a copy of the shard's state and
optimizer state and re-applying every push (CPU per push roughly the primary's
update, not its networking); the log must be on storage every replica reads
(one machine, or a shared filesystem).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional

from psgd.runtime.files import atomic_write
from psgd.runtime.lifeline import primary_file
from psgd.servers.checkpoint import ShardCheckpoint, apply_record, load_shard_state
from psgd.servers.push_log import read_log_from
from psgd.servers.state import ShardState
from psgd.wire.transport import ServerSocket, TransportError

__all__ = ["ShardFollower", "wait_for_address", "claim", "PROBE_S"]

PROBE_S = 0.01  # how often a backup tries to take the address (and reads the primary's log)


class ShardFollower:
    """A ShardState kept equal to the primary's by reading its snapshot and push logs."""

    def __init__(self, checkpoint: ShardCheckpoint, make_state: Callable[[], ShardState],
                 clock: Callable[[], float] = time.monotonic):
        self.checkpoint = checkpoint
        self._make_state = make_state
        self._clock = clock
        self.state: Optional[ShardState] = None
        self.generation = 0   # of the log being read
        self.offset = 0       # bytes of it applied
        self.applied = 0      # log records applied since the last snapshot load
        self.reloads = 0      # snapshots loaded (more than one: it fell behind a log the primary dropped)

    def catch_up(self) -> int:
        """Apply what the primary logged since the last call; returns the records applied."""
        if self.state is None and not self._load():
            return 0
        n = 0
        while True:
            path = self.checkpoint.log_path(self.generation)
            try:
                n += self._apply(path)
            except FileNotFoundError:
                if not self._later_logs():
                    return n  # its snapshot is written, its log not yet opened
                if not self._load():  # fell behind: the primary dropped this log after two snapshots
                    return n
                continue
            if not self.checkpoint.log_path(self.generation + 1).exists():
                return n
            # Snapshot G+1 is written and log G closed before log G+1 is opened: log G is whole.
            n += self._apply(path)
            self.generation, self.offset = self.generation + 1, 0

    def _apply(self, path: Path) -> int:
        records, self.offset = read_log_from(path, self.offset)
        now = self._clock()
        for rec in records:
            apply_record(self.state, rec, now)
        self.applied += len(records)
        return len(records)

    def _later_logs(self) -> bool:
        prefix = f"shard-{self.checkpoint.shard}.log."
        gens = [int(p.name[len(prefix):]) for p in self.checkpoint.dir.glob(prefix + "*")
                if p.name[len(prefix):].isdigit()]
        return any(g > self.generation for g in gens)

    def _load(self) -> bool:
        sd, _, _ = self.checkpoint.files.load_first_good()
        if sd is None:
            return False
        state = self._make_state()
        load_shard_state(state, sd, self.checkpoint.fingerprint, self._clock())
        self.state, self.generation, self.offset, self.applied = state, int(sd["generation"]), 0, 0
        self.reloads += 1
        return True

    def take_over(self) -> ShardState:
        """The state to serve from, once this process holds the address: the dead
        primary's last records read, its workers given a fresh timeout window, and the
        shard's checkpoint files adopted (a new snapshot written)."""
        self.catch_up()
        if self.state is None:  # the primary died before its first snapshot: start as it would have
            self._load() or self._fresh()
        now = self._clock()
        self.state.last_seen = {r: now for r in self.state.registered if r not in self.state.board.departed}
        self.checkpoint.adopt(self.state, self.generation)
        return self.state

    def _fresh(self) -> None:
        self.state = self._make_state()
        self.generation = 0


def wait_for_address(address: str, bind: Callable[[str], ServerSocket], follower: ShardFollower,
                     stop: threading.Event, should_stop: Callable[[], bool]) -> Optional[ServerSocket]:
    """Follow the primary until this process binds `address` (the primary is gone);
    returns the bound socket, or None when told to stop first."""
    while not stop.is_set() and not should_stop():
        try:
            return bind(address)
        except TransportError:
            pass
        follower.catch_up()
        time.sleep(PROBE_S)
    return None


def claim(run_dir: Optional[Path], shard: int, pid: int) -> None:
    """Record that `pid` serves shard `shard` now."""
    if run_dir is not None:
        atomic_write(primary_file(run_dir, shard), f"{pid}\n")
