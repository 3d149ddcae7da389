"""Which shard connections are up: ZeroMQ's own connection events, per DEALER socket.

A shard that dies closes its TCP connections at once; the client's socket sees
DISCONNECTED within a millisecond and keeps reconnecting (every 100 ms, see
ShardConnections). When a shard is back on the address (restarted, or a backup
promoted to it) the socket's handshake succeeds again. `RequestTracker` reads
these changes: a request outstanding on a shard that came back is resent at once
instead of at `cluster.request_timeout_s`, and a shard that is down (was up, then
dropped) does not use up the request's attempts, so a worker rides out a restart
however long the launcher's backoff makes it.

"Up" is the handshake, not the TCP connect: a CurveZMQ handshake that is refused
never counts as up, so a client without the right keys still fails after its
attempts instead of waiting.
"""
from __future__ import annotations

from enum import Enum
from typing import Sequence

import zmq
from zmq.utils.monitor import recv_monitor_message

__all__ = ["Link", "LinkWatch"]

_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED


class Link(Enum):
    UP = "up"        # a handshake succeeded: requests reach the shard
    DOWN = "down"    # an established connection dropped: the shard is gone for now


class LinkWatch:
    """The connection events of one socket per shard. Not thread-safe: read from the
    thread that polls the sockets (the monitors join the same poller)."""

    def __init__(self, socks: Sequence[zmq.Socket], poller: zmq.Poller):
        self._monitors = {}
        for shard, sock in enumerate(socks):
            monitor = sock.get_monitor_socket(_EVENTS)
            poller.register(monitor, zmq.POLLIN)
            self._monitors[monitor] = shard
        self._up = [False] * len(socks)
        self._down = [False] * len(socks)  # was up, then dropped: being restarted or failed over
        self._changes: list[tuple[int, Link]] = []
        self.unread = 0  # changes not yet taken by `changes` (a waiting client checks this between polls)
        self.drops = [0] * len(socks)  # connections lost, per shard

    def owns(self, sock) -> bool:
        return sock in self._monitors

    def read(self, monitor) -> None:
        """Take every event waiting on one monitor socket (the poller said it is readable)."""
        shard = self._monitors[monitor]
        while monitor.poll(0):
            event = recv_monitor_message(monitor, flags=zmq.NOBLOCK)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                back = self._down[shard]
                self._up[shard], self._down[shard] = True, False
                if back:
                    self._changes.append((shard, Link.UP))
                    self.unread += 1
            elif event == zmq.EVENT_DISCONNECTED and self._up[shard]:
                self._up[shard], self._down[shard] = False, True
                self.drops[shard] += 1
                self._changes.append((shard, Link.DOWN))
                self.unread += 1

    def down(self, shard: int) -> bool:
        """Shard's connection was up and has dropped, and is not back yet."""
        return self._down[shard]

    def changes(self) -> list[tuple[int, Link]]:
        """The reconnections (UP after a drop) and drops since the last call, in order."""
        out, self._changes, self.unread = self._changes, [], 0
        return out

    def close(self, socks: Sequence[zmq.Socket]) -> None:
        for sock in socks:
            sock.disable_monitor()
        for monitor in self._monitors:
            monitor.close(0)
        self._monitors = {}
