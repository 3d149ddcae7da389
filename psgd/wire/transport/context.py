"""The process's ZeroMQ context, addresses, and the transport's error."""
from __future__ import annotations

import os
from typing import Optional

import zmq

__all__ = ["TransportError", "tcp_address", "zmq_context", "zmq_versions"]


class TransportError(RuntimeError):
    pass


def tcp_address(hostport: str) -> str:
    return hostport if hostport.startswith(("tcp://", "ipc://", "inproc://")) else f"tcp://{hostport}"


def zmq_context() -> zmq.Context:
    # One context per process; zmq.Context.instance() is fork-unsafe, so key it by pid.
    global _CTX, _CTX_PID
    if _CTX is None or _CTX_PID != os.getpid():
        _CTX, _CTX_PID = zmq.Context(), os.getpid()
    return _CTX


_CTX: Optional[zmq.Context] = None
_CTX_PID = -1


def zmq_versions() -> dict:
    """pyzmq's and the linked libzmq's versions (for `psgd doctor`)."""
    return {"pyzmq": zmq.pyzmq_version(), "libzmq": zmq.zmq_version()}
