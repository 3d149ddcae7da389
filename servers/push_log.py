"""The shard's push log: every state change since the last snapshot, one
checksummed record each, appended before the change is acknowledged.

A record is a 16-byte head ``<meta length, payload length, CRC32C(meta +
payload), CRC32C(first 12 head bytes)>``, then msgpack meta, then raw payload:

- ``["push", rank, seq, clock, read_version]`` + the float32 gradient bytes;
- ``["push_sparse", rank, seq, clock, read_version, nnz]`` + nnz int32
  indices then nnz float32 values (a top-k push, stored as it arrived);
- ``["join", rank]`` / ``["depart", rank]``, no payload;
- ``["setting", clock, origin, fields]``: a `psgd ctl` change in force from `clock`;
- ``["close", 0]``: a quorum's grace window closed (consistency.quorum), no payload.

A push record may end with the step time its worker reported (the adaptive
bound's input) and then the training steps behind it (a quorum weighs a delta by
them), so a replay decides as the live shard did.

Reading tells a torn tail from corruption. A process kill leaves a prefix of
what was written, so the last record can only be cut short: fewer bytes than
a head, or a valid head whose body runs past the end of the file. That record
was never acknowledged and is ignored. Anything else (a head or body whose
checksum fails) is damage, and `read_log` raises LogCorrupt naming the file
and byte offset instead of dropping the acknowledged records after it.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Union

import crc32c
import msgpack
import torch

from psgd.core.live_settings import plain_fields, typed_fields

__all__ = ["PushLogWriter", "LogRecord", "LogCorrupt", "read_log", "read_log_from",
           "OP_PUSH", "OP_PUSH_SPARSE", "OP_JOIN", "OP_DEPART", "OP_SETTING", "OP_CLOSE"]

OP_PUSH = "push"
OP_PUSH_SPARSE = "push_sparse"
OP_JOIN = "join"
OP_DEPART = "depart"
OP_SETTING = "setting"
OP_CLOSE = "close"

_HEAD = struct.Struct("<IIII")
_HEAD_CRC_SPAN = 12  # the head checksum covers the three fields before it

Gradient = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


class LogCorrupt(RuntimeError):
    """A damaged record in the middle of a push log: replay must stop here."""

    def __init__(self, path: Path, offset: int, record: int, why: str):
        self.path, self.offset = Path(path), offset
        super().__init__(f"push log {path} is damaged at byte {offset} (record {record}): {why}; "
                         "the records after it cannot be trusted, so replay stops")


@dataclass(frozen=True)
class LogRecord:
    op: str
    rank: int
    seq: int = 0
    clock: int = 0
    read_version: int = 0
    grad: Optional[Gradient] = None  # dense float32 tensor or (int32 indices, float32 values)
    step_s: float = 0.0
    setting: Optional[tuple[int, str, dict]] = None  # OP_SETTING: (clock, origin, fields)
    steps: int = 1  # training steps behind a push (a local round's)


class PushLogWriter:
    """Appends records to one log file. A failed write (disk full) truncates
    the file back to its last whole record and re-raises, so a later append
    never lands behind garbage."""

    def __init__(self, path: Path, fsync: bool = False):
        self.path = Path(path)
        self.fsync = fsync
        self._f: Optional[BinaryIO] = open(self.path, "ab")
        self.offset = self._f.tell()
        self.records = 0
        self.nbytes = 0

    def push(self, rank: int, seq: int, clock: int, read_version: int, grad: Gradient, step_s: float = 0.0,
             steps: int = 1) -> None:
        if isinstance(grad, tuple):
            indices, values = grad
            if indices.dtype != torch.int32:
                indices = indices.to(torch.int32)
            self._append([OP_PUSH_SPARSE, rank, seq, clock, read_version, int(values.numel()), step_s, steps],
                         _bytes(indices), _bytes(values.float()))
        else:
            self._append([OP_PUSH, rank, seq, clock, read_version, step_s, steps], _bytes(grad.float()))

    def close_round(self) -> None:
        self._append([OP_CLOSE, 0])

    def setting(self, clock: int, origin: str, fields: dict) -> None:
        self._append([OP_SETTING, clock, origin, plain_fields(fields)])

    def join(self, rank: int) -> None:
        self._append([OP_JOIN, rank])

    def depart(self, rank: int) -> None:
        self._append([OP_DEPART, rank])

    def _append(self, meta: list, *payload) -> None:
        m = msgpack.packb(meta)
        crc = crc32c.crc32c(m)
        plen = 0
        for part in payload:
            crc = crc32c.crc32c(part, crc)
            plen += part.nbytes
        head = struct.pack("<III", len(m), plen, crc)
        head += struct.pack("<I", crc32c.crc32c(head))
        try:
            self._f.write(head + m)
            for part in payload:
                self._f.write(part)
            self._f.flush()  # into the kernel: survives a kill of this process
            if self.fsync:
                os.fsync(self._f.fileno())
        except OSError:
            self._truncate_to_last_record()
            raise
        size = _HEAD.size + len(m) + plen
        self.offset += size
        self.records += 1
        self.nbytes += size

    def _truncate_to_last_record(self) -> None:
        try:
            self._f.close()  # drops what is still buffered (its flush may fail again)
        except OSError:
            pass
        try:
            os.truncate(self.path, self.offset)
            self._f = open(self.path, "ab")
        except OSError:
            self._f = None  # nothing more can be written; the caller stops the shard

    def close(self) -> None:
        if self._f is not None:
            try:
                self._f.close()
            finally:
                self._f = None


def _bytes(t: torch.Tensor) -> memoryview:
    return memoryview(t.detach().contiguous().cpu().numpy()).cast("B")


def read_log(path: Path) -> Iterator[LogRecord]:
    """Every intact record of the log at `path` (none if it does not exist);
    stops quietly at a torn tail, raises LogCorrupt at damage."""
    path = Path(path)
    if not path.exists():
        return
    records, _ = read_log_from(path, 0)
    yield from records


def read_log_from(path: Path, offset: int) -> tuple[list[LogRecord], int]:
    """The intact records from byte `offset` on, and the offset after the last of them:
    a standby reads a log that is still being appended (psgd.servers.standby) record
    by record. A record cut short at the end is left for the next read (its writer may
    still be writing it); damage raises LogCorrupt. FileNotFoundError if there is no log."""
    path = Path(path)
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    pos, out = 0, []
    while len(data) - pos >= _HEAD.size:
        mlen, plen, crc, head_crc = _HEAD.unpack_from(data, pos)
        if crc32c.crc32c(data[pos:pos + _HEAD_CRC_SPAN]) != head_crc:
            raise LogCorrupt(path, offset + pos, len(out), "record head checksum mismatch")
        start = pos + _HEAD.size
        end = start + mlen + plen
        if end > len(data):
            break  # torn tail: cut short by a crash (never acknowledged), or still being written
        body = memoryview(data)[start:end]
        if crc32c.crc32c(body) != crc:
            raise LogCorrupt(path, offset + pos, len(out), "record checksum mismatch")
        out.append(_parse(path, offset + pos, len(out), bytes(body[:mlen]), body[mlen:]))
        pos = end
    return out, offset + pos


def _step_s(meta: list, at: int) -> float:
    """The step time a push record carries (0 in logs written before it did)."""
    return float(meta[at]) if len(meta) > at else 0.0


def _steps(meta: list, at: int) -> int:
    """The training steps a push record carries (1 in logs written before it did)."""
    return int(meta[at]) if len(meta) > at else 1


def _parse(path: Path, pos: int, n: int, meta_bytes: bytes, payload: memoryview) -> LogRecord:
    try:
        meta = msgpack.unpackb(meta_bytes)
        op, rank = meta[0], int(meta[1])
        if op == OP_PUSH:
            if payload.nbytes % 4:
                raise ValueError("gradient bytes not a multiple of 4")
            grad = torch.frombuffer(bytearray(payload), dtype=torch.float32)
            return LogRecord(op, rank, int(meta[2]), int(meta[3]), int(meta[4]), grad, _step_s(meta, 5),
                             steps=_steps(meta, 6))
        if op == OP_PUSH_SPARSE:
            nnz = int(meta[5])
            if payload.nbytes != 8 * nnz:
                raise ValueError(f"sparse payload of {payload.nbytes} bytes for nnz {nnz}")
            buf = bytearray(payload)
            if nnz == 0:
                grad = (torch.empty(0, dtype=torch.int32), torch.empty(0))
            else:
                grad = (torch.frombuffer(buf, dtype=torch.int32, count=nnz),
                        torch.frombuffer(buf, dtype=torch.float32, offset=4 * nnz, count=nnz))
            return LogRecord(op, rank, int(meta[2]), int(meta[3]), int(meta[4]), grad, _step_s(meta, 6),
                             steps=_steps(meta, 7))
        if op in (OP_JOIN, OP_DEPART, OP_CLOSE):
            return LogRecord(op, rank)
        if op == OP_SETTING:
            return LogRecord(op, 0, setting=(rank, str(meta[2]), typed_fields(dict(meta[3]))))
        raise ValueError(f"unknown operation {op!r}")
    except (ValueError, TypeError, IndexError, AttributeError, msgpack.UnpackException) as exc:
        # The checksum matched, so this was written like this: a bug or another format.
        raise LogCorrupt(path, pos, n, f"unreadable record: {exc}") from None
