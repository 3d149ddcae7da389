"""Shared-memory segments for the same-host data path.

A client that shares a host with a shard moves the bulk bytes of a request
(the gradient) and of its reply (the parameters) through one segment per
connection instead of through the socket; the message keeps the header and
names the segment's generation, so requests, replies, ordering and every
consistency rule stay in messages (which travel over ZeroMQ, or over the
connection's doorbell pipes: psgd.wire.shm.doorbell).

Lifecycle (no segment outlives its processes, SIGKILL included):
- the client `create`s an anonymous memory file (memfd), reserves every
  page, seals it against shrinking and growing, maps it, and offers
  (name, token) when it registers; the name, psgd-PID-FD, says where the
  shard finds it: /proc/PID/fd/FD;
- the shard attaches (psgd.wire.shm.attached): it opens that path only if
  the name has psgd's form, the file is sealed against shrinking, the header
  carries the same token and the regions hold its tensor; a shard on another
  host (or in another pid namespace) finds no such file, or another one
  without that token, so the client falls back to TCP;
- the client closes its descriptor once the shard has answered the offer
  (either way): from then on only the two mappings (and the shard's open
  file) keep the memory, and the kernel frees it when both are gone. There
  is never a file to clean up.

Layout: a 64-byte header, then the request region, then the reply region,
each starting on a page boundary.

    0  magic "PSGDSHM1"     8  token (16 bytes)
    24 request capacity     32 reply capacity      (u64, little-endian)
    40 request generation   48 reply generation    (u64)

Generations are staleness checks, not synchronisation (the ZeroMQ message
is): the client bumps the request generation before it writes into the
region (so no earlier request names it any more) and again after, names
the second in its request, and the shard copies the region only if the
generation matches before and after its copy. So a request given up
(timed out) and answered late can never copy half of the next gradient.
The shard writes a reply only for a request id above the last it wrote
(a late resend of an older request must not overwrite parameters the client
may be reading) and stamps it with that id.

Creation reserves every page (posix_fallocate), so a machine without the
memory refuses the segment at once and the client stays on TCP, instead of
a fault mid-run.

Trust: both processes must run as the same user (/proc/PID/fd is only open
to it). The shard maps the segment, which is safe only because the seal
makes the size permanent: no process, the client included, can shrink the
file under the mapping (a mapping of a file that can shrink faults, SIGBUS,
on the next access). The shard still never reads a gradient in place: it
copies each request once into a buffer of its own and checks, applies and
logs that copy, so a client rewriting its memory cannot change what the
shard checked. Secured (CurveZMQ) runs keep every byte on the socket.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import re
import secrets
import struct
import warnings
from typing import Optional, Union

import torch

from psgd.wire.protocol import ErrorCode
from psgd.wire.shm import PROC

__all__ = ["Segment", "ShmError", "available", "segment_bytes", "reply_offset", "reply_slot_at", "REPLY_SLOTS",
           "SEALS", "PROC"]

MAGIC = b"PSGDSHM1"
HEADER_BYTES = 64
PAGE = mmap.PAGESIZE
_HEADER = struct.Struct("<8s16sQQ")          # magic, token, request capacity, reply capacity
_GEN = struct.Struct("<Q")
_REQUEST_GEN_AT, _REPLY_GEN_AT = 40, 48
_NAME = re.compile(r"^psgd-(\d{1,10})-(\d{1,10})$")
MAX_SEGMENT_BYTES = 1 << 40                  # refuse absurd capacities from a header
# The seals every segment carries: its size can never change, and no seal can be added or removed.
SEALS = getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4) | getattr(fcntl, "F_SEAL_SEAL", 1)


class ShmError(RuntimeError):
    """A segment that cannot be created or attached; `code` says why in one word."""

    def __init__(self, code: str, reason: str):
        self.code, self.reason = code, reason
        super().__init__(f"{code}: {reason}")


def available() -> bool:
    """Whether segments can be made here (Linux memfd with seals, and a /proc to find them by)."""
    return hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and os.path.isdir(f"{PROC}/self/fd")


def _round_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


REQUEST_AT = _round_up(HEADER_BYTES)


def reply_offset(request_capacity: int) -> int:
    """Where the reply region starts in a segment whose request region holds `request_capacity` bytes."""
    return REQUEST_AT + _round_up(request_capacity)


# A pipelined worker trains on one reply while the next lands: its segment's reply region
# holds two slots, and each PUSH_PULL names the slot its parameters go to.
REPLY_SLOTS = 2


def reply_slot_at(slot: int, nbytes: int) -> int:
    """Where reply slot `slot` starts within the reply region, for replies of `nbytes`
    (page-aligned, so a slot's tensors never share a page with the other's)."""
    return slot * _round_up(nbytes)


def segment_bytes(request_capacity: int, reply_capacity: int) -> int:
    return reply_offset(request_capacity) + _round_up(reply_capacity)


def parse_name(name: str) -> Optional[tuple[int, int]]:
    """(pid, fd) of a segment name of psgd's form, else None."""
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


class Segment:
    """The client's side of one connection's shared memory: it writes the
    request region and reads the reply region, through its own mapping.
    Used from one thread."""

    def __init__(self, mm: mmap.mmap, fd: int, token: bytes, request_capacity: int, reply_capacity: int):
        self.name = f"psgd-{os.getpid()}-{fd}"
        self.token = token
        self.request_capacity = request_capacity
        self.reply_capacity = reply_capacity
        self._fd = fd
        self._mm = mm
        reply_at = reply_offset(request_capacity)
        whole = torch.frombuffer(mm, dtype=torch.uint8)
        # Byte views of both regions, made once: every copy in or out is one tensor copy.
        self._request = whole[REQUEST_AT:REQUEST_AT + request_capacity]
        self._reply = whole[reply_at:reply_at + reply_capacity]
        self._request_gen = 0
        self._src: tuple = (None, 0, None)   # the last payload copied in: (object, data_ptr, its byte view)
        self._views: dict = {}          # (region, nbytes, dtype) -> typed view, made once
        self._replies: dict = {}        # (slot, numel, dtype) -> reply_tensor's view, bounds checked once

    @property
    def token_hex(self) -> str:
        return self.token.hex()

    def unlink(self) -> None:
        """Close this process's descriptor, so the name no longer leads to the
        segment (the mappings stay valid). Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def linked(self) -> bool:
        """Whether the name still leads to the segment (the shard can attach)."""
        return self._fd >= 0

    def close(self) -> None:
        """Give up the name and the mapping.
        The mapping is never closed explicitly: tensors over it (returned views)
        hold a reference to it, and it is unmapped when the last one is freed;
        closing it under them would leave them pointing at unmapped memory."""
        self.unlink()
        self._request = self._reply = None
        self._src, self._views, self._replies = (None, 0, None), {}, {}
        self._mm = None

    # ---- client side ------------------------------------------------------
    @classmethod
    def create(cls, request_bytes: int, reply_bytes: int) -> "Segment":
        """A new segment owned by this process: every page reserved, sealed at its size."""
        if request_bytes < 0 or reply_bytes < 0:
            raise ValueError("region sizes must be >= 0")
        if not available():
            raise ShmError(ErrorCode.CREATE_FAILED, "this system has no sealable memfd (Linux >= 3.17)")
        size = segment_bytes(request_bytes, reply_bytes)
        try:
            fd = os.memfd_create("psgd-segment", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError as exc:
            raise ShmError(ErrorCode.CREATE_FAILED, f"cannot create a memfd: {exc.strerror}") from None
        try:
            # Reserve every page now: pages bought on first touch would, short of memory,
            # fault in whichever process writes first, mid-run.
            os.posix_fallocate(fd, 0, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
            mm = mmap.mmap(fd, size)
        except OSError as exc:
            os.close(fd)
            raise ShmError(ErrorCode.NO_SPACE, f"cannot reserve a segment of {size} bytes: {exc.strerror}") from None
        token = secrets.token_bytes(16)
        _HEADER.pack_into(mm, 0, MAGIC, token, request_bytes, reply_bytes)
        return cls(mm, fd, token, request_bytes, reply_bytes)

    def request_tensor(self, dtype: torch.dtype, numel: int) -> torch.Tensor:
        """The request region's front as a `numel`-element tensor of `dtype` (no
        copy; the same object every time). A payload made in it (a gradient
        flattened or encoded straight into it) is sent by `put_request` without
        a copy. Write it only while no request on this connection is in flight."""
        nbytes = numel * dtype.itemsize
        if not 0 <= nbytes <= self.request_capacity:
            raise ValueError(f"{nbytes} bytes exceed the segment's {self.request_capacity}")
        self._next_generation()  # the caller is about to write: no earlier request may read it now
        return self._typed("request", self._request, nbytes, dtype)

    def holds(self, data) -> bool:
        """Whether `data` is a tensor made in the request region (see request_tensor)."""
        return (isinstance(data, torch.Tensor) and data.numel() > 0 and self._request is not None
                and data.data_ptr() == self._request.data_ptr() and data.is_contiguous()
                and data.numel() * data.element_size() <= self.request_capacity)

    def put_request(self, data: Union[torch.Tensor, memoryview, bytes]) -> tuple[int, int]:
        """Copy one request payload into the request region (nothing to copy when
        it was made there); returns (generation, bytes) for the request's descriptor."""
        obj, ptr, view = self._src
        if obj is data and type(data) is torch.Tensor and data.data_ptr() == ptr:
            # The buffer copied in last time, where it was then (so not made in the region, and its
            # size checked): copy it again, as _bytes' cached view would.
            n = view.numel()
            self._next_generation()
            self._typed("request", self._request, n, torch.uint8).copy_(view)
        elif self.holds(data):
            n = data.numel() * data.element_size()
        else:
            src = self._bytes(data)
            n = src.numel()
            if n > self.request_capacity:
                raise ValueError(f"payload of {n} bytes exceeds the segment's {self.request_capacity}")
            self._next_generation()
            self._typed("request", self._request, n, torch.uint8).copy_(src)
        return self._next_generation(), n

    def _next_generation(self) -> int:
        self._request_gen += 1
        _GEN.pack_into(self._mm, _REQUEST_GEN_AT, self._request_gen)
        return self._request_gen

    def reply_view(self, req: int, nbytes: int) -> Optional[torch.Tensor]:
        """The reply region's first `nbytes` (a uint8 tensor, no copy), if the
        shard stamped it for request `req`; None otherwise. Its contents are
        valid until the next request on this connection."""
        if not 0 <= nbytes <= self.reply_capacity or _GEN.unpack_from(self._mm, _REPLY_GEN_AT)[0] != req:
            return None
        return self._reply[:nbytes]

    def reply_tensor(self, req: int, dtype: torch.dtype, numel: int, slot: int = 0) -> Optional[torch.Tensor]:
        """`reply_view` as a `numel`-element tensor of `dtype`, in reply slot `slot`
        (the same tensor object every time for the same shape and slot: it aliases
        the region)."""
        view = self._replies.get((slot, numel, dtype))  # a shape read before: its bounds were checked then
        if view is None:
            nbytes = numel * dtype.itemsize
            at = reply_slot_at(slot, nbytes)
            if not 0 <= slot < REPLY_SLOTS or not 0 <= at + nbytes <= self.reply_capacity:
                return None
            view = self._replies[slot, numel, dtype] = self._typed("reply", self._reply, nbytes, dtype, at)
        return view if _GEN.unpack_from(self._mm, _REPLY_GEN_AT)[0] == req else None

    def _typed(self, region: str, whole: torch.Tensor, nbytes: int, dtype: torch.dtype, at: int = 0) -> torch.Tensor:
        key = (region, at, nbytes, dtype)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = whole[at:at + nbytes].view(dtype)
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
