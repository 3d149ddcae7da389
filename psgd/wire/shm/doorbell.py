"""Doorbells: a pair of pipes beside a shared-memory connection that carry
its header-only messages, so a same-host round trip wakes one thread each
way instead of four.

A ZeroMQ message passes through the sender's I/O thread and the receiver's
before it wakes the receiver; on the 2-core machine of benchmarks/comm that
cost 0.11-0.15 ms per round trip at 1 MB (the ZeroMQ-woken shared-memory floor
against the pipe-woken one). A connection whose payloads travel through its
segment sends only headers, so it can ring instead: the request's header
goes down a pipe the shard polls beside its ROUTER socket, the reply's
header comes back up another pipe the client polls beside its DEALER
sockets. ZeroMQ stays the path for everything else: registration (a bell
exists only once a shard has answered), messages with tensor frames, and
any message a bell cannot take.

Lifecycle, as for segments (psgd.wire.shm.segment): the client makes both pipes and
offers the name psgd-PID-R-W (R: the request pipe's read end, W: the reply
pipe's write end) when it registers; the shard opens /proc/PID/fd/R and
/proc/PID/fd/W (the same user only), checks both are pipes, and answers;
then the client closes R and W, so only the shard holds them. From then on
either side's exit is seen by the other at once: a write finds no reader
(EPIPE) or a read finds the end of the pipe, and that side drops its bell
and goes on over ZeroMQ (a restarted shard, which never heard of the bell,
is reached there and asks the client to register again).

Framing: a 4-byte little-endian length, then the header. Every message is at
most MAX_MESSAGE_BYTES, below PIPE_BUF, so a non-blocking write puts all of it
in the pipe or none of it (a full pipe: the sender uses ZeroMQ for that
message), and messages are never interleaved. A reader that finds a length
above that limit drops the bell: the pipe is no longer framed.
"""
from __future__ import annotations

import errno
import os
import re
import select
import stat
import struct
from typing import Optional

from psgd.wire.shm import PROC

__all__ = ["ClientBell", "ShardBell", "Bells", "PolledBells", "BellError", "ring", "MAX_MESSAGE_BYTES", "parse_bell_name"]

_LENGTH = struct.Struct("<I")
# Below PIPE_BUF (4096 on Linux; POSIX guarantees at least 512 atomically, Linux 4096).
MAX_MESSAGE_BYTES = select.PIPE_BUF - _LENGTH.size
_READ_BYTES = 1 << 16
_NAME = re.compile(r"^psgd-(\d{1,10})-(\d{1,10})-(\d{1,10})$")


class BellError(RuntimeError):
    """A bell that cannot be made or opened; `code` says why in one word."""

    def __init__(self, code: str, reason: str):
        self.code, self.reason = code, reason
        super().__init__(f"{code}: {reason}")


def parse_bell_name(name: str) -> Optional[tuple[int, int, int]]:
    """(pid, request read fd, reply write fd) of a bell name of psgd's form, else None."""
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


class _Pipes:
    """One side of a bell: the descriptor it reads, the one it writes, and the
    bytes read but not yet framed into messages."""

    def __init__(self, read_fd: int, write_fd: int):
        self.read_fd, self.write_fd = read_fd, write_fd
        self._pending = b""
        self.dead = False

    def fileno(self) -> int:
        """The descriptor to poll for messages."""
        return self.read_fd

    def ring(self, header) -> bool:
        """Send one header-only message. False, and nothing sent, when it is too
        large, the pipe is full, or the other side is gone (then the bell is dead)."""
        view = memoryview(header)
        if self.dead or view.nbytes > MAX_MESSAGE_BYTES:
            return False
        try:
            os.write(self.write_fd, _LENGTH.pack(view.nbytes) + view)
            return True
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                self.dead = True
                return False
            raise

    def read(self) -> Optional[list[bytes]]:
        """Every whole message waiting (maybe none); None when the other side has
        closed its end or broke the framing (then the bell is dead)."""
        if self.dead:
            return None
        try:
            data = os.read(self.read_fd, _READ_BYTES)
        except BlockingIOError:
            return []
        except OSError:
            self.dead = True
            return None
        if not data:
            self.dead = True
            return None
        buf, out, at = self._pending + data, [], 0
        while len(buf) - at >= _LENGTH.size:
            (n,) = _LENGTH.unpack_from(buf, at)
            if n > MAX_MESSAGE_BYTES:
                self.dead = True
                return None
            if len(buf) - at - _LENGTH.size < n:
                break
            out.append(buf[at + _LENGTH.size:at + _LENGTH.size + n])
            at += _LENGTH.size + n
        self._pending = buf[at:]
        return out

    def close(self) -> None:
        self.dead = True
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = -1


class ClientBell(_Pipes):
    """The client's side: writes requests, reads replies."""

    def __init__(self, req_read: int, req_write: int, rep_read: int, rep_write: int):
        super().__init__(rep_read, req_write)
        self._shard_ends = [req_read, rep_write]  # kept open until the shard has opened them
        self.name = f"psgd-{os.getpid()}-{req_read}-{rep_write}"

    @classmethod
    def create(cls) -> "ClientBell":
        try:
            req_read, req_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise BellError("create_failed", f"cannot make a pipe: {exc.strerror}") from None
        try:
            rep_read, rep_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            os.close(req_read)
            os.close(req_write)
            raise BellError("create_failed", f"cannot make a pipe: {exc.strerror}") from None
        return cls(req_read, req_write, rep_read, rep_write)

    def settle(self) -> None:
        """The shard has answered: close the ends it opened, so that its exit
        shows here as EPIPE and end of pipe. Idempotent."""
        for fd in self._shard_ends:
            os.close(fd)
        self._shard_ends = []

    def close(self) -> None:
        self.settle()
        super().close()


class ShardBell(_Pipes):
    """The shard's side: reads requests, writes replies."""

    @classmethod
    def open(cls, name: str, proc: str = PROC) -> "ShardBell":
        """Open a client's bell. Raises BellError unless the name has psgd's form and
        both descriptors lead to pipes of this user."""
        where = parse_bell_name(name)
        if where is None:
            raise BellError("bad_name", f"{name!r} is not a psgd bell name")
        pid, req_read, rep_write = where
        fds = []
        try:
            for fd, mode in ((req_read, os.O_RDONLY), (rep_write, os.O_WRONLY)):
                try:
                    fds.append(os.open(f"{proc}/{pid}/fd/{fd}", mode | os.O_NONBLOCK | os.O_CLOEXEC))
                except OSError:
                    raise BellError("not_here", f"no bell {name} on this host") from None
                st = os.fstat(fds[-1])
                if not (stat.S_ISFIFO(st.st_mode) and st.st_uid == os.geteuid()):
                    raise BellError("not_ours", f"{name} is not a pipe of this user")
        except BellError:
            for fd in fds:
                os.close(fd)
            raise
        return cls(fds[0], fds[1])


class Bells:
    """Open bells by key (a client's shard index, a shard's connection identity).
    `version` changes with every add and drop, so a poller knows when to look again."""

    def __init__(self):
        self._by_key: dict = {}
        self.version = 0
        self.dropped = 0   # bells dropped because the other side went away or broke the framing

    def add(self, key, bell: _Pipes) -> None:
        self.drop(key)
        self._by_key[key] = bell
        self.version += 1

    def drop(self, key, lost: bool = False) -> None:
        bell = self._by_key.pop(key, None)
        if bell is not None:
            bell.close()
            self.version += 1
            self.dropped += lost

    def get(self, key) -> Optional[_Pipes]:
        return self._by_key.get(key)

    def items(self) -> list:
        return list(self._by_key.items())

    def __len__(self) -> int:
        return len(self._by_key)

    def close(self) -> None:
        for key in list(self._by_key):
            self.drop(key)


def ring(bells: Optional[Bells], key, frames) -> bool:
    """Send a header-only message (`frames`: just the header) through `key`'s bell;
    False when it has none or the bell cannot take it (send it over ZeroMQ)."""
    if bells is None or len(frames) != 1:
        return False
    bell = bells.get(key)
    if bell is None:
        return False
    if bell.ring(frames[0]):
        return True
    if bell.dead:
        bells.drop(key, lost=True)
    return False


class PolledBells:
    """Keeps a poller's registrations in step with a Bells table, and reads
    the bells a poll reports."""

    def __init__(self, poller, bells: Bells, pollin: int):
        """`poller`: a zmq.Poller or a select.epoll (register/unregister over descriptors);
        `pollin`: its flag for readable."""
        self._poller, self._bells, self._pollin = poller, bells, pollin
        self._seen = -1
        self._keys: dict[int, object] = {}   # polled descriptor -> its bell's key

    def sync(self) -> None:
        if self._seen == self._bells.version:
            return
        for fd in self._keys:
            try:
                self._poller.unregister(fd)
            except (OSError, KeyError):  # an epoll set forgot a closed descriptor by itself
                pass
        self._keys = {bell.fileno(): key for key, bell in self._bells.items()}
        for fd in self._keys:
            self._poller.register(fd, self._pollin)
        self._seen = self._bells.version

    def take(self, item, out: list) -> bool:
        """If poll reported `item` for a bell: append its messages to `out` as
        (key, [header]) and return True (a bell whose peer is gone is dropped)."""
        key = self._keys.get(item) if isinstance(item, int) else None
        if key is None:
            return False
        bell = self._bells.get(key)
        got = bell.read() if bell is not None and bell.fileno() == item else []
        if got is None:
            self._bells.drop(key, lost=True)
        else:
            for message in got:  # a loop, not extend() over a generator: a wake-up reads one message or two
                out.append((key, [message]))
        return True
