"""The shard's side of a shared-memory segment (see psgd.wire.shm).

The shard holds the client's file open but never maps it: a mapping of a
file its owner can shrink turns every later access into a possible SIGBUS,
and a view of memory the client can rewrite lets a gradient change between
the finite check and the update. So a request is read once, with pread,
into a buffer the shard owns (a short read means the file was cut: the
request is refused), and a reply is written with pwrite.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import torch

from psgd.wire.shm import (
    _GEN,
    _HEADER,
    _NAME,
    _REPLY_GEN_AT,
    _REQUEST_GEN_AT,
    HEADER_BYTES,
    MAGIC,
    MAX_SEGMENT_BYTES,
    REQUEST_AT,
    SHM_DIR,
    ShmError,
    _bytes_of,
    reply_offset,
    segment_bytes,
)

__all__ = ["AttachedSegment"]


class AttachedSegment:
    """A client's segment as the shard uses it: reads requests into its own
    buffers, writes replies. Used from one thread."""

    def __init__(self, fd: int, name: str, request_capacity: int, reply_capacity: int):
        self.name = name
        self.request_capacity = request_capacity
        self.reply_capacity = reply_capacity
        self.last_reply_req = -1     # the newest request id answered through the segment
        self._fd = fd
        self._reply_at = reply_offset(request_capacity)

    @classmethod
    def attach(cls, name: str, token_hex: str, request_bytes: int, reply_bytes: int,
               directory: Optional[Path] = None) -> "AttachedSegment":
        """Open a client's segment. Raises ShmError (the client then stays on TCP)
        unless the name has psgd's form, the file exists here and is a regular
        file of this user, its header carries `token_hex`, and its regions hold
        at least `request_bytes` and `reply_bytes`."""
        if _NAME.match(name) is None:
            raise ShmError("bad_name", f"{name!r} is not a psgd segment name")
        try:
            token = bytes.fromhex(token_hex)
        except ValueError:
            raise ShmError("bad_token", "token is not hex") from None
        try:
            fd = os.open(Path(directory or SHM_DIR) / name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            raise ShmError("not_here", f"no segment {name} on this host") from None
        try:
            st = os.fstat(fd)
            if not (st.st_mode & 0o170000 == 0o100000 and st.st_uid == os.geteuid()):
                raise ShmError("not_ours", f"{name} is not a regular file of this user")
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
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, name, req_cap, rep_cap)

    def read_request(self, gen: int, out: torch.Tensor) -> bool:
        """Copy the request payload into `out` (contiguous; its byte size is the
        payload's). False, with `out` to be ignored, when the client has not
        written generation `gen` (or has since overwritten it), the payload
        exceeds the region, or the file was cut short."""
        nbytes = out.numel() * out.element_size()
        if self._fd < 0 or not 0 <= nbytes <= self.request_capacity or self._generation(_REQUEST_GEN_AT) != gen:
            return False
        return _pread_into(self._fd, _writable_bytes(out), REQUEST_AT) == nbytes

    def put_reply(self, req: int, data: Union[torch.Tensor, memoryview, bytes]) -> bool:
        """Write a reply payload and stamp it with request id `req`. Refuses
        (returns False: send it inline) a request id not above the last one
        answered here, a payload larger than the region, or a file cut short."""
        src = _bytes_of(data)
        n = src.numel()
        if self._fd < 0 or req <= self.last_reply_req or n > self.reply_capacity:
            return False
        try:
            # pwrite into a cut file would grow it back rather than fault; refused anyway,
            # so a client that shrank its segment is answered on the socket.
            if os.fstat(self._fd).st_size < self._reply_at + n:
                return False
            _pwrite_all(self._fd, memoryview(src.numpy()) if n else b"", self._reply_at)
            os.pwrite(self._fd, _GEN.pack(req), _REPLY_GEN_AT)
        except OSError:
            return False
        self.last_reply_req = req
        return True

    def close(self) -> None:
        """Let go of the file; the client's mapping keeps the memory until it closes too. Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _generation(self, at: int) -> int:
        raw = os.pread(self._fd, _GEN.size, at)
        return _GEN.unpack(raw)[0] if len(raw) == _GEN.size else -1


def _writable_bytes(t: torch.Tensor) -> memoryview:
    if not t.is_contiguous():
        raise ValueError("read_request needs a contiguous buffer")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else memoryview(bytearray())


def _pread_into(fd: int, buf: memoryview, offset: int) -> int:
    """Fill `buf` from `offset`; returns the bytes read (fewer at end of file)."""
    done = 0
    while done < len(buf):
        try:
            got = os.preadv(fd, [buf[done:]], offset + done)
        except OSError:
            return done
        if got == 0:
            break
        done += got
    return done


def _pwrite_all(fd: int, buf, offset: int) -> None:
    view = memoryview(buf)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
