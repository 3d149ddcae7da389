"""Durable shard state: atomic snapshots plus an append-only log of what
changed since the last one, so a killed shard loses nothing it acknowledged.

Files under RUN_DIR/checkpoints/ for shard i:
- ``shard-i.pt``: a snapshot (parameters, optimizer state, clocks, version,
  BSP aggregate, counters, histograms, the exactly-once seq table) written to
  a temp file, fsynced, renamed over the old one, and the directory fsynced.
  It names the log generation that continues it.
- ``shard-i.log.G``: every state-changing operation applied after snapshot G
  (pushes with their decoded gradient, joins, departures), appended *before*
  the push is acknowledged. A process kill cannot lose a write() that has
  returned; `fsync_log` also covers power loss. A torn last record (the crash
  hit mid-write) fails its length/CRC check and is ignored: its push was never
  acknowledged, so the client resends it.

On start, `resume` loads the snapshot with ``torch.load(weights_only=True)``,
replays the log through the same ShardState methods (deterministic, so the
result is bit-identical), and writes a fresh snapshot. Not covered: DC-ASGD's
per-worker "parameters last read" (a replayed DC-ASGD push is applied without
compensation).
"""
from __future__ import annotations

import os
import struct
import time
import zlib
from pathlib import Path
from typing import BinaryIO, Optional

import msgpack
import torch

from psgd.config import CheckpointConfig
from psgd.servers.state import PushStatus, ShardState

__all__ = ["CheckpointError", "ShardCheckpoint", "shard_state_dict", "load_shard_state"]

SNAPSHOT_FORMAT = 1
_RECORD_HEAD = struct.Struct("<III")  # meta length, payload length, crc32(meta + payload)

# Log operations: what changed the state, in the order it happened.
OP_PUSH = "push"      # [op, rank, seq, clock, read_version] + float32 gradient bytes
OP_JOIN = "join"      # [op, rank]: a worker (re)registered
OP_DEPART = "depart"  # [op, rank]: a worker left or timed out


class CheckpointError(RuntimeError):
    """A snapshot that cannot be used for this shard (other model, shard count or mode)."""


def shard_state_dict(state: ShardState, fingerprint: str) -> dict:
    """Everything a restarted shard needs, as tensors and plain values only
    (so it loads with weights_only=True)."""
    bsp = state.bsp
    return {
        "format": SNAPSHOT_FORMAT,
        "fingerprint": fingerprint,
        "shard": state.shard,
        "mode": state.mode.value,
        "workers": state.workers,
        "params": state.params.clone(),
        "rule": state.rule.state_dict(),
        "version": state.version,
        "clocks": list(state.board.clocks),
        "departed": sorted(state.board.departed),
        "last_seq": list(state.last_seq),
        "registered": sorted(state.registered),
        "counters": dict(state.counters),
        "staleness": {int(k): int(v) for k, v in state.staleness.counts.items()},
        "clock_gaps": {int(k): int(v) for k, v in state.clock_gaps.counts.items()},
        "bsp": None if bsp is None else bsp.state_dict(),
    }


def load_shard_state(state: ShardState, sd: dict, fingerprint: str, now: float) -> None:
    """Overwrite a fresh ShardState with a snapshot. Raises CheckpointError on a mismatch."""
    expect = {"format": SNAPSHOT_FORMAT, "fingerprint": fingerprint, "shard": state.shard,
              "mode": state.mode.value, "workers": state.workers}
    for key, want in expect.items():
        if sd.get(key) != want:
            raise CheckpointError(f"snapshot {key} is {sd.get(key)!r}, this shard has {want!r}")
    if sd["params"].shape != state.params.shape:
        raise CheckpointError(f"snapshot holds {sd['params'].numel()} parameters, shard has {state.numel}")
    state.params.copy_(sd["params"])
    state.rule.load_state_dict(sd["rule"])
    state.version = int(sd["version"])
    state.board.clocks = [int(c) for c in sd["clocks"]]
    state.board.departed = set(sd["departed"])
    state.last_seq = [int(s) for s in sd["last_seq"]]
    state.registered = set(sd["registered"])
    # Restored members must show up again or time out, so the quorum cannot hang on them.
    state.last_seen = {r: now for r in state.registered if r not in state.board.departed}
    state.counters.clear()
    state.counters.update(sd["counters"])
    state.staleness.counts.clear()
    state.staleness.counts.update(sd["staleness"])
    state.clock_gaps.counts.clear()
    state.clock_gaps.counts.update(sd["clock_gaps"])
    if state.bsp is not None and sd["bsp"] is not None:
        state.bsp.load_state_dict(sd["bsp"])


class ShardCheckpoint:
    """Snapshots and the operation log of one shard. Single-threaded, like the shard loop."""

    def __init__(self, directory: Path, shard: int, fingerprint: str, cfg: CheckpointConfig,
                 clock=time.monotonic):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shard = shard
        self.fingerprint = fingerprint
        self.cfg = cfg
        self._clock = clock
        self.path = self.dir / f"shard-{shard}.pt"
        self.generation = 0
        self.logged = 0                      # log records since the last snapshot
        self.logged_bytes = 0
        self._log: Optional[BinaryIO] = None
        self._saved_version = 0
        self._saved_at = clock()

    def log_path(self, generation: int) -> Path:
        return self.dir / f"shard-{self.shard}.log.{generation}"

    # ---- start --------------------------------------------------------------
    def resume(self, state: ShardState) -> Optional[dict]:
        """Load the latest snapshot and replay its log into `state`, then start a
        new generation. Returns {"version", "replayed"} or None if there was no snapshot."""
        info = None
        if self.path.exists():
            try:
                sd = torch.load(self.path, weights_only=True)
            except Exception as exc:  # torch raises several types for a damaged or unsafe file
                raise CheckpointError(f"cannot load {self.path}: {type(exc).__name__}: {exc}") from None
            load_shard_state(state, sd, self.fingerprint, self._clock())
            self.generation = int(sd["generation"])
            snapshot_version = state.version
            replayed = self._replay(state, self.log_path(self.generation))
            info = {"snapshot_version": snapshot_version, "replayed": replayed, "version": state.version}
        self.save(state)
        return info

    def _replay(self, state: ShardState, path: Path) -> int:
        n = 0
        for meta, payload in read_log(path):
            op, rank = meta[0], meta[1]
            if op == OP_PUSH:
                grad = torch.frombuffer(bytearray(payload), dtype=torch.float32)
                result = state.push(rank, meta[2], meta[3], meta[4], grad)
                if result.status is not PushStatus.DUPLICATE:
                    state.counters[f"push_{result.status.value}"] += 1
            elif op == OP_JOIN:
                state.register(rank, self._clock())
            elif op == OP_DEPART:
                state.leave(rank)
            else:
                raise CheckpointError(f"{path}: unknown log operation {op!r}")
            n += 1
        return n

    # ---- while serving -------------------------------------------------------
    def due(self, state: ShardState) -> bool:
        if state.version == self._saved_version and self.logged == 0:
            return False
        by_count = self.cfg.every_updates and state.version - self._saved_version >= self.cfg.every_updates
        by_time = self.cfg.every_s and self._clock() - self._saved_at >= self.cfg.every_s
        by_size = self.logged_bytes >= self.cfg.max_log_mb << 20
        return bool(by_count or by_time or by_size)

    def save(self, state: ShardState) -> None:
        """Write snapshot generation G+1 atomically, then switch to its (empty) log."""
        nxt = self.generation + 1
        sd = shard_state_dict(state, self.fingerprint)
        sd["generation"] = nxt
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            torch.save(sd, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.dir)
        if self._log is not None:
            self._log.close()
        self._log = open(self.log_path(nxt), "ab")
        self.log_path(self.generation).unlink(missing_ok=True)
        self.generation = nxt
        self.logged = 0
        self.logged_bytes = 0
        self._saved_version = state.version
        self._saved_at = self._clock()

    def log_push(self, rank: int, seq: int, clock: int, read_version: int, grad: torch.Tensor) -> None:
        """Record a handled (non-duplicate) push; call before acknowledging it."""
        self._append([OP_PUSH, rank, seq, clock, read_version], memoryview(grad.contiguous().numpy()).cast("B"))

    def log_join(self, rank: int) -> None:
        self._append([OP_JOIN, rank], b"")

    def log_depart(self, rank: int) -> None:
        self._append([OP_DEPART, rank], b"")

    def _append(self, meta: list, payload) -> None:
        m = msgpack.packb(meta)
        crc = zlib.crc32(payload, zlib.crc32(m))
        self._log.write(_RECORD_HEAD.pack(len(m), len(payload), crc) + m)
        self._log.write(payload)
        self._log.flush()  # into the kernel: survives a kill of this process
        if self.cfg.fsync_log:
            os.fsync(self._log.fileno())
        self.logged += 1
        self.logged_bytes += _RECORD_HEAD.size + len(m) + len(payload)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def read_log(path: Path):
    """Yield (meta, payload) of every complete, intact record; stop at a torn tail."""
    if not path.exists():
        return
    data = path.read_bytes()
    pos = 0
    while pos + _RECORD_HEAD.size <= len(data):
        mlen, plen, crc = _RECORD_HEAD.unpack_from(data, pos)
        start = pos + _RECORD_HEAD.size
        end = start + mlen + plen
        if end > len(data):
            return
        m, payload = data[start:start + mlen], data[start + mlen:end]
        if zlib.crc32(payload, zlib.crc32(m)) != crc:
            return
        yield msgpack.unpackb(m), payload
        pos = end


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
