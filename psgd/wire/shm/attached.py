"""The shard's side of a shared-memory segment (see psgd.wire.shm.segment).

The shard maps the client's segment, but only one sealed against shrinking:
a mapping of a file that can shrink turns every later access into a
possible SIGBUS, and the seal makes the size the shard checked permanent.
It never reads a gradient in place either (the client can rewrite its
memory at any time): `read_request` copies the payload once into a buffer
the shard owns, and the finite check, the update and the log all read that
copy. Replies are copied into the reply region.
"""
from __future__ import annotations

import fcntl
import mmap
import os
from typing import Union

import torch

from psgd.wire.shm.segment import (
    _GEN,
    _HEADER,
    _REPLY_GEN_AT,
    _REQUEST_GEN_AT,
    HEADER_BYTES,
    MAGIC,
    MAX_SEGMENT_BYTES,
    PROC,
    REPLY_SLOTS,
    REQUEST_AT,
    ShmError,
    _bytes_of,
    parse_name,
    reply_offset,
    reply_slot_at,
    segment_bytes,
)

__all__ = ["AttachedSegment", "REQUIRED_SEALS"]

# Without F_SEAL_SHRINK a client could cut the file under the shard's mapping.
REQUIRED_SEALS = fcntl.F_SEAL_SHRINK if hasattr(fcntl, "F_SEAL_SHRINK") else 2


MAX_SPANS = 16  # region views kept per segment


class AttachedSegment:
    """A client's segment as the shard uses it: copies requests into its own
    buffers, writes replies. Used from one thread."""

    def __init__(self, mm: mmap.mmap, name: str, request_capacity: int, reply_capacity: int,
                 file_id: tuple[int, int] = (-1, -1)):
        self.name = name
        self.file_id = file_id       # (st_dev, st_ino) of the file mapped: what the name led to
        self.request_capacity = request_capacity
        self.reply_capacity = reply_capacity
        self.last_reply_req = -1     # the newest request id answered through the segment
        self._mm = mm  # holds the file open itself (mmap keeps a descriptor of its own)
        whole = torch.frombuffer(mm, dtype=torch.uint8)
        reply_at = reply_offset(request_capacity)
        self._request = whole[REQUEST_AT:REQUEST_AT + request_capacity]
        self._reply = whole[reply_at:reply_at + reply_capacity]
        # Views reused from message to message (each costs a torch call to make): spans of the
        # regions by (region, byte offset, bytes), and the byte views of the last buffers read
        # into and replied from, by (object, address). Let go with the mapping.
        self._spans: dict[tuple, torch.Tensor] = {}
        # The last tensor copied into / out of (it, its address, its bytes' view): lists, so
        # _bytes_view updates them in place without a getattr/setattr by name per request.
        self._into: list = [None, 0, None]
        self._from: list = [None, 0, None]

    @classmethod
    def attach(cls, name: str, token_hex: str, request_bytes: int, reply_bytes: int,
               proc: str = PROC) -> "AttachedSegment":
        """Open and map a client's segment. Raises ShmError (the client then stays
        on TCP) unless the name has psgd's form, it leads to a regular file of this
        user sealed against shrinking, its header carries `token_hex`, and its
        regions hold at least `request_bytes` and `reply_bytes`."""
        where = parse_name(name)
        if where is None:
            raise ShmError("bad_name", f"{name!r} is not a psgd segment name")
        try:
            token = bytes.fromhex(token_hex)
        except ValueError:
            raise ShmError("bad_token", "token is not hex") from None
        try:
            fd = os.open(f"{proc}/{where[0]}/fd/{where[1]}", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            raise ShmError("not_here", f"no segment {name} on this host") from None
        try:
            st = os.fstat(fd)
            if not (st.st_mode & 0o170000 == 0o100000 and st.st_uid == os.geteuid()):
                raise ShmError("not_ours", f"{name} is not a regular file of this user")
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            if seals & REQUIRED_SEALS != REQUIRED_SEALS:
                raise ShmError("not_sealed", f"{name} can shrink under a mapping (no F_SEAL_SHRINK)")
            header = os.pread(fd, HEADER_BYTES, 0)
            if len(header) < HEADER_BYTES:
                raise ShmError("bad_segment", f"{name} is {st.st_size} bytes, shorter than its header")
            magic, got_token, req_cap, rep_cap = _HEADER.unpack_from(header, 0)
            if magic != MAGIC or got_token != token:
                raise ShmError("bad_token", f"{name} was not made by this client")
            if req_cap > MAX_SEGMENT_BYTES or rep_cap > MAX_SEGMENT_BYTES or segment_bytes(req_cap, rep_cap) > st.st_size:
                raise ShmError("bad_segment", f"{name}'s header does not match its size")
            if req_cap < request_bytes or rep_cap < reply_bytes:
                raise ShmError("too_small", f"{name} holds {req_cap}/{rep_cap} bytes, "
                                            f"needs {request_bytes}/{reply_bytes}")
            mm = mmap.mmap(fd, segment_bytes(req_cap, rep_cap))  # within the sealed size: no fault possible
        except OSError as exc:
            raise ShmError("bad_segment", f"{name} cannot be mapped: {exc.strerror}") from None
        finally:
            os.close(fd)
        return cls(mm, name, req_cap, rep_cap, (st.st_dev, st.st_ino))

    def still_named(self, name: str, proc: str = PROC) -> bool:
        """Whether `name` is this segment's offer still: it leads to the file mapped, or
        nowhere any more (the client gave the name up once the shard answered). A name
        that leads to another file now is another offer, to be checked on its own."""
        where = parse_name(name)
        if where is None or name != self.name:
            return False
        try:
            st = os.stat(f"{proc}/{where[0]}/fd/{where[1]}")
        except OSError:
            return True
        return (st.st_dev, st.st_ino) == self.file_id

    def read_request(self, gen: int, out: torch.Tensor, at: int = 0) -> bool:
        """Copy the request payload's bytes from byte `at` on (a piece of it: `at` > 0)
        into `out` (contiguous; its byte size is what is read). False, with `out` to be
        ignored, when the client has not written generation `gen`, started writing
        another payload before the copy ended, or the bytes exceed the region."""
        nbytes = out.numel() * out.element_size()
        if (self._mm is None or at < 0 or not 0 <= at + nbytes <= self.request_capacity
                or _GEN.unpack_from(self._mm, _REQUEST_GEN_AT)[0] != gen):
            return False
        if not out.is_contiguous():
            raise ValueError("read_request needs a contiguous buffer")
        if nbytes:
            self._bytes_view(self._into, out).copy_(self._span("request", at, nbytes))  # the one read of client memory
        # The client bumps the generation before it writes: a change means it wrote during the copy.
        return _GEN.unpack_from(self._mm, _REQUEST_GEN_AT)[0] == gen

    def put_reply(self, req: int, data: Union[torch.Tensor, memoryview, bytes], slot: int = 0) -> bool:
        """Write a reply payload into reply slot `slot` and stamp it with request id
        `req`. Refuses (returns False: send it inline) a request id not above the last
        one answered here, or a payload that does not fit the region at that slot."""
        src = self._bytes_view(self._from, data) if isinstance(data, torch.Tensor) else _bytes_of(data)
        n = src.numel()
        at = reply_slot_at(slot, n) if 0 <= slot < REPLY_SLOTS else -1
        if self._mm is None or req <= self.last_reply_req or not 0 <= at <= at + n <= self.reply_capacity:
            return False
        if n:
            self._span("reply", at, n).copy_(src)
        _GEN.pack_into(self._mm, _REPLY_GEN_AT, req)
        self.last_reply_req = req
        return True

    def _span(self, region: str, at: int, nbytes: int) -> torch.Tensor:
        key = (region, at, nbytes)
        view = self._spans.get(key)
        if view is None:
            if len(self._spans) >= MAX_SPANS:  # pieces of varying offsets: keep the table small
                self._spans.clear()
            whole = self._request if region == "request" else self._reply
            view = self._spans[key] = whole[at:at + nbytes]
        return view

    @staticmethod
    def _bytes_view(last: list, t: torch.Tensor) -> torch.Tensor:
        """`t`'s bytes as a flat uint8 tensor (`t` contiguous), the view of `last` (the
        previous tensor's [tensor, address, view], updated here) reused."""
        obj, ptr, view = last
        if obj is not t or t.data_ptr() != ptr:
            view = _bytes_of(t)
            last[:] = (t, t.data_ptr(), view)
        return view

    def close(self) -> None:
        """Let go of the mapping (and with it the file); the client's mapping keeps the memory. Idempotent."""
        self._request = self._reply = None
        self._spans.clear()
        self._into, self._from = [None, 0, None], [None, 0, None]
        if self._mm is not None:
            try:
                self._mm.close()  # no view of it leaves this class, so none is left to fault
            except BufferError:  # a view is still alive after all: unmapped when it goes
                pass
            self._mm = None

