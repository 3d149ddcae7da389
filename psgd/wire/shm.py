"""Shared-memory segments for the same-host data path.

A client that shares a host with a shard moves the bulk bytes of a request
(the gradient) and of its reply (the parameters) through one segment per
connection instead of through the socket; the ZeroMQ message keeps the
header and names the segment's generation, so requests, replies, ordering
and every consistency rule stay on ZeroMQ.

Lifecycle (no segment outlives its processes, SIGKILL included):
- the client `create`s a file under /dev/shm named after its own pid and
  process start time, and offers (name, token) when it registers;
- the shard attaches (psgd.wire.shm_attached): it opens the file only if
  the name has psgd's form, the header carries the same token, and the
  regions hold its tensor; a shard on another host finds no such file, so
  the client falls back to TCP;
- the client unlinks the file once the shard has answered the offer (either
  way); from then on only the client's mapping and the shard's open file
  keep the memory, and the kernel frees it when both are gone (the shard
  closes its file when the connection leaves or times out);
- a process killed between create and unlink leaves its file behind:
  `reclaim` (run by every later `create` and by a starting shard) removes
  files whose creating process no longer runs.

Layout: a 64-byte header, then the request region, then the reply region,
each starting on a page boundary.

    0  magic "PSGDSHM1"     8  token (16 bytes)
    24 request capacity     32 reply capacity      (u64, little-endian)
    40 request generation   48 reply generation    (u64)

Generations are staleness checks, not synchronisation (the ZeroMQ message
is): the client bumps the request generation after writing a gradient and
names it in its request; the shard reads the region only if they match.
The shard writes a reply only for a request id above the last it wrote
(a late resend of an older request must not overwrite parameters the client
may be reading) and stamps it with that id.

Creation reserves every page (posix_fallocate), so a /dev/shm too small for
the segment refuses it at once and the client stays on TCP, instead of a
page fault (SIGBUS) mid-run.

Trust: both processes must run as the same user (files are 0600). The shard
never maps a client's file: it reads a request once, with pread, into a
buffer of its own, and checks, applies and logs that copy; it writes replies
with pwrite. A client that rewrites or truncates its segment therefore can
neither change what the shard checked nor make it fault. Secured (CurveZMQ)
runs still keep every byte on the socket.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
import struct
import warnings
from pathlib import Path
from typing import Optional, Union

import torch

from psgd.wire.protocol import ErrorCode

__all__ = ["Segment", "ShmError", "reclaim", "SHM_DIR", "PREFIX", "available", "process_start_time",
           "segment_bytes", "reply_offset"]

SHM_DIR = Path("/dev/shm")
PREFIX = "psgd-"
MAGIC = b"PSGDSHM1"
HEADER_BYTES = 64
PAGE = mmap.PAGESIZE
_HEADER = struct.Struct("<8s16sQQ")          # magic, token, request capacity, reply capacity
_GEN = struct.Struct("<Q")
_REQUEST_GEN_AT, _REPLY_GEN_AT = 40, 48
_NAME = re.compile(r"^psgd-(\d+)-(\d+)-([0-9a-f]{16})$")
MAX_SEGMENT_BYTES = 1 << 40                  # refuse absurd capacities from a header


class ShmError(RuntimeError):
    """A segment that cannot be created or attached; `code` says why in one word."""

    def __init__(self, code: str, reason: str):
        self.code, self.reason = code, reason
        super().__init__(f"{code}: {reason}")


def available(directory: Optional[Path] = None) -> bool:
    """Whether segments can be made here (a writable tmpfs directory)."""
    d = Path(directory or SHM_DIR)
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def process_start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot, or None if it does not run.
    Together with the pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return int(fields[19])  # field 22 of stat; [0] here is field 3


def _round_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


REQUEST_AT = _round_up(HEADER_BYTES)


def reply_offset(request_capacity: int) -> int:
    """Where the reply region starts in a segment whose request region holds `request_capacity` bytes."""
    return REQUEST_AT + _round_up(request_capacity)


def segment_bytes(request_capacity: int, reply_capacity: int) -> int:
    return reply_offset(request_capacity) + _round_up(reply_capacity)


def reclaim(directory: Optional[Path] = None) -> list[str]:
    """Unlink segments whose creating process is gone; returns their names.
    Only names of psgd's own form are touched."""
    d = Path(directory or SHM_DIR)
    removed = []
    try:
        names = os.listdir(d)
    except OSError:
        return removed
    for name in names:
        m = _NAME.match(name)
        if m is None:
            continue
        pid, start = int(m.group(1)), int(m.group(2))
        if process_start_time(pid) == start:
            continue
        try:
            os.unlink(d / name)
            removed.append(name)
        except FileNotFoundError:  # another process reclaimed it first
            pass
    return removed


class Segment:
    """The client's side of one connection's shared memory: it writes the
    request region and reads the reply region, through its own mapping.
    Used from one thread."""

    def __init__(self, mm: mmap.mmap, path: Path, token: bytes, request_capacity: int, reply_capacity: int):
        self.path = path
        self.name = path.name
        self.token = token
        self.request_capacity = request_capacity
        self.reply_capacity = reply_capacity
        self._mm = mm
        reply_at = reply_offset(request_capacity)
        whole = torch.frombuffer(mm, dtype=torch.uint8) if len(mm) else torch.empty(0, dtype=torch.uint8)
        # Byte views of both regions, made once: every copy in or out is one tensor copy.
        self._request = whole[REQUEST_AT:REQUEST_AT + request_capacity]
        self._reply = whole[reply_at:reply_at + reply_capacity]
        self._request_gen = 0
        self._src: tuple = (None, 0, None)   # the last payload copied in: (object, data_ptr, its byte view)
        self._views: dict = {}          # (region, nbytes, dtype) -> typed view, made once

    # ---- both sides ---------------------------------------------------------
    @property
    def token_hex(self) -> str:
        return self.token.hex()

    def unlink(self) -> None:
        """Remove the file (the mappings stay valid). Idempotent."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    @property
    def linked(self) -> bool:
        return self.path.exists()

    def close(self) -> None:
        """Unlink the file and let go of the mapping.
        The mapping is never closed explicitly: tensors over it (returned views)
        hold a reference to it, and it is unmapped when the last one is freed;
        closing it under them would leave them pointing at unmapped memory."""
        self.unlink()
        self._request = self._reply = None
        self._src, self._views = (None, 0, None), {}
        self._mm = None

    # ---- client side ------------------------------------------------------
    @classmethod
    def create(cls, request_bytes: int, reply_bytes: int, directory: Optional[Path] = None) -> "Segment":
        """A new segment owned by this process (mode 0600). Reclaims dead
        processes' segments first."""
        d = Path(directory or SHM_DIR)
        reclaim(d)
        if request_bytes < 0 or reply_bytes < 0:
            raise ValueError("region sizes must be >= 0")
        pid = os.getpid()
        start = process_start_time(pid)
        path = d / f"{PREFIX}{pid}-{start}-{secrets.token_hex(8)}"
        token = secrets.token_bytes(16)
        size = segment_bytes(request_bytes, reply_bytes)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise ShmError(ErrorCode.CREATE_FAILED, f"cannot create {path}: {exc.strerror}") from None
        try:
            # Reserve every page now: tmpfs pages bought on first touch would, on a full
            # /dev/shm, fault (SIGBUS) in whichever process writes first, mid-run.
            os.posix_fallocate(fd, 0, size)
            mm = mmap.mmap(fd, size)
        except OSError as exc:
            os.close(fd)
            os.unlink(path)
            raise ShmError(ErrorCode.NO_SPACE, f"{d} cannot hold a segment of {size} bytes: {exc.strerror}") from None
        os.close(fd)
        _HEADER.pack_into(mm, 0, MAGIC, token, request_bytes, reply_bytes)
        return cls(mm, path, token, request_bytes, reply_bytes)

    def put_request(self, data: Union[torch.Tensor, memoryview, bytes]) -> tuple[int, int]:
        """Copy one request payload into the request region; returns
        (generation, bytes) for the request's descriptor."""
        src = self._bytes(data)
        n = src.numel()
        if n > self.request_capacity:
            raise ValueError(f"payload of {n} bytes exceeds the segment's {self.request_capacity}")
        self._typed("request", self._request, n, torch.uint8).copy_(src)
        self._request_gen += 1
        _GEN.pack_into(self._mm, _REQUEST_GEN_AT, self._request_gen)
        return self._request_gen, n

    def reply_view(self, req: int, nbytes: int) -> Optional[torch.Tensor]:
        """The reply region's first `nbytes` (a uint8 tensor, no copy), if the
        shard stamped it for request `req`; None otherwise. Its contents are
        valid until the next request on this connection."""
        if not 0 <= nbytes <= self.reply_capacity or _GEN.unpack_from(self._mm, _REPLY_GEN_AT)[0] != req:
            return None
        return self._reply[:nbytes]

    def reply_tensor(self, req: int, dtype: torch.dtype, numel: int) -> Optional[torch.Tensor]:
        """`reply_view` as a `numel`-element tensor of `dtype` (the same tensor
        object every time for the same shape: it aliases the region)."""
        nbytes = numel * dtype.itemsize
        if not 0 <= nbytes <= self.reply_capacity or _GEN.unpack_from(self._mm, _REPLY_GEN_AT)[0] != req:
            return None
        return self._typed("reply", self._reply, nbytes, dtype)

    def _typed(self, region: str, whole: torch.Tensor, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
        key = (region, nbytes, dtype)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = whole[:nbytes].view(dtype)
        return view

    def _bytes(self, data) -> torch.Tensor:
        """`data`'s bytes as a uint8 tensor; the view is reused while the same
        object (at the same address) is passed again, as reused buffers are."""
        obj, ptr, view = self._src
        if obj is data and (not isinstance(data, torch.Tensor) or data.data_ptr() == ptr):
            return view
        view = _bytes_of(data)
        self._src = (data, data.data_ptr() if isinstance(data, torch.Tensor) else 0, view)
        return view


def _bytes_of(data) -> torch.Tensor:
    """A flat uint8 tensor over a contiguous tensor's or a buffer's bytes (no copy)."""
    if isinstance(data, torch.Tensor):
        if not data.is_contiguous():
            raise ValueError("shared-memory payloads must be contiguous")
        return data.reshape(-1).view(torch.uint8) if data.numel() else torch.empty(0, dtype=torch.uint8)
    view = memoryview(data).cast("B")
    if not view.nbytes:
        return torch.empty(0, dtype=torch.uint8)
    if view.readonly:  # only read from here; torch warns about read-only buffers regardless
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.frombuffer(view, dtype=torch.uint8)
    return torch.frombuffer(view, dtype=torch.uint8)
