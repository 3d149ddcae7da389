"""A worker's heartbeats: a private thread with its own sockets tells every shard, every
`period` seconds, that this rank is alive, in the session each shard's WELCOME gave."""
from __future__ import annotations

import threading
from typing import Optional

from psgd.wire import protocol as P
from psgd.wire.transport import CurveKeys, ShardConnections

__all__ = ["Heartbeats"]


class Heartbeats:
    def __init__(self, addresses: list[str], rank: int, sessions: list[str], period: float,
                 curve: Optional[CurveKeys]):
        """`sessions`: the client's list, updated in place as shards welcome it again."""
        self._addresses, self._rank, self._sessions, self._curve = addresses, rank, sessions, curve
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), name="psgd-heartbeat", daemon=True)

    def start(self) -> None:
        """Once, at the first registration (later registrations find it running or stopped)."""
        if self._thread.ident is None:
            self._thread.start()

    def stop(self, join_s: float = 0.0) -> None:
        self._stop.set()
        if join_s and self._thread.is_alive():
            self._thread.join(timeout=join_s)

    def _run(self, period: float) -> None:
        conns = ShardConnections(self._addresses, curve=self._curve)
        try:
            while not self._stop.wait(period):
                conns.recv(0)  # refusals (a session from before a shard restart) must not pile up
                for s in range(len(self._addresses)):
                    conns.send(s, P.encode(P.Heartbeat(rank=self._rank, session=self._sessions[s])))
        finally:
            conns.close()
