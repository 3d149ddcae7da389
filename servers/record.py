"""What a replay needs of a real run: every change to a shard's state, in the order it happened.

Each shard appends one small msgpack record per state change to
RUN_DIR/record/shard-S.msgpack: a worker joined or left, a push was handled
(rank, seq, clock, read_version, step_s, and the version after it), a pull
was answered, a `psgd ctl` change was committed. No gradient is kept: the
replay recomputes each one from the worker's data and the parameters at
`read_version` (psgd.sim.replay). The order is the single-threaded event
loop's, so replaying the records through a ShardState repeats the run's
arithmetic exactly; the versions are there to say where a replay diverged.

A clean stop ends the file with an END record; a shard that was killed, or
restarted (a second header), leaves a record that cannot be replayed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import msgpack

from psgd.core.live_settings import plain_fields, typed_fields

__all__ = ["FORMAT", "Op", "OpKind", "RecordError", "ShardRecord", "ShardRecorder", "read_record", "record_path"]

FORMAT = 1
BUFFER_BYTES = 1 << 16  # a few hundred records per write(): the shard's loop never waits on the disk


class OpKind(str, Enum):
    START = "start"      # header: shard, numel, version at start
    JOIN = "join"
    DEPART = "depart"
    PUSH = "push"
    PULL = "pull"
    SETTING = "setting"  # a committed psgd ctl change
    CLOSE = "close"      # a quorum's grace window closed (consistency.quorum)
    END = "end"          # the shard stopped cleanly


class RecordError(Exception):
    """A record that cannot be replayed: missing, cut short, or from a restarted shard."""


def record_path(run_dir: Path, shard: int) -> Path:
    return Path(run_dir) / "record" / f"shard-{shard}.msgpack"


class ShardRecorder:
    """Appends shard `shard`'s state changes. `version` reads the shard's current
    version (recorded after each push and pull, to locate a divergence)."""

    def __init__(self, path: Path, shard: int, numel: int, version):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab", buffering=BUFFER_BYTES)
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._version = version
        self._write([OpKind.START.value, FORMAT, shard, numel, version()])

    def _write(self, rec: list) -> None:
        self._file.write(self._pack(rec))

    # The names of the shard's journal (psgd.servers.checkpoint), so one call feeds both.
    def log_join(self, rank: int) -> None:
        self._write([OpKind.JOIN.value, rank])

    def log_depart(self, rank: int) -> None:
        self._write([OpKind.DEPART.value, rank])

    def log_push(self, rank: int, seq: int, clock: int, read_version: int, grad, step_s: float = 0.0,
                 steps: int = 1) -> None:
        """`steps`: the training steps behind the push (a local-update round's)."""
        self._write([OpKind.PUSH.value, rank, seq, clock, read_version, float(step_s), self._version(), steps])

    def log_pull(self, rank: int, clock: int) -> None:
        self._write([OpKind.PULL.value, rank, clock, self._version()])

    def log_setting(self, clock: int, origin: str, fields: dict) -> None:
        self._write([OpKind.SETTING.value, clock, origin, plain_fields(fields)])

    def log_close(self) -> None:
        self._write([OpKind.CLOSE.value, self._version()])

    def close(self, ended: bool = True) -> None:
        """`ended`: the shard stopped cleanly (a crash leaves no END, so no replay)."""
        if self._file.closed:
            return
        if ended:
            self._write([OpKind.END.value, self._version()])
        self._file.close()


@dataclass(frozen=True)
class Op:
    kind: OpKind
    rank: int = -1
    seq: int = -1
    clock: int = -1
    read_version: int = -1
    step_s: float = 0.0
    version: int = -1                 # the shard's version after the op (pushes and pulls)
    steps: int = 1                    # training steps behind a push (a local-update round's)
    setting: Optional[tuple[int, str, dict]] = None


@dataclass
class ShardRecord:
    shard: int
    numel: int
    start_version: int
    end_version: int
    ops: list[Op] = field(default_factory=list)


def _op(rec: list[Any]) -> Op:
    kind = OpKind(rec[0])
    if kind in (OpKind.JOIN, OpKind.DEPART):
        return Op(kind, rank=int(rec[1]))
    if kind is OpKind.PUSH:
        rank, seq, clock, read_version, step_s, version, steps = rec[1:8]
        return Op(kind, rank=rank, seq=seq, clock=clock, read_version=read_version, step_s=step_s, version=version,
                  steps=steps)
    if kind is OpKind.PULL:
        return Op(kind, rank=rec[1], clock=rec[2], version=rec[3])
    if kind is OpKind.CLOSE:
        return Op(kind, version=int(rec[1]))
    if kind is OpKind.SETTING:
        return Op(kind, setting=(int(rec[1]), str(rec[2]), typed_fields(dict(rec[3]))))
    raise ValueError(f"unexpected {kind.value} record")


def read_record(path: Path) -> ShardRecord:
    """Shard record at `path`, checked whole. Raises RecordError saying what is wrong."""
    if not path.is_file():
        raise RecordError(f"{path} does not exist: the run was not recorded (run.record: false, "
                          "or a psgd older than replay)")
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    with open(path, "rb") as f:
        unpacker.feed(f.read())
    record: Optional[ShardRecord] = None
    try:
        for i, rec in enumerate(unpacker):
            if not isinstance(rec, list) or not rec:
                raise ValueError("not a record")
            kind = OpKind(rec[0])
            if kind is OpKind.START:
                if record is not None:
                    raise RecordError(f"{path}: the shard restarted during the run (record {i}); "
                                      "replay covers runs without restarts")
                if rec[1] != FORMAT:
                    raise RecordError(f"{path}: record format {rec[1]}, this psgd reads {FORMAT}")
                record = ShardRecord(shard=int(rec[2]), numel=int(rec[3]), start_version=int(rec[4]), end_version=-1)
                continue
            if record is None:
                raise ValueError("no header")
            if record.end_version >= 0:
                raise ValueError("record after the end")
            if kind is OpKind.END:
                record.end_version = int(rec[1])
                continue
            record.ops.append(_op(rec))
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
        raise RecordError(f"{path}: unreadable record ({exc})") from None
    if record is None:
        raise RecordError(f"{path} is empty")
    if record.end_version < 0:
        raise RecordError(f"{path} has no end: the shard did not stop cleanly (killed?), so its last "
                          "changes may be missing")
    return record
