"""The transport: the only package that imports zmq at run time (the bench's raw-ZeroMQ
baselines import it too, to measure it).

- sockets.py: a shard's ROUTER socket and a client's DEALER socket per shard;
- link_watch.py: those connections' drops and reconnections (a shard back is resent to at once);
- curve.py: CurveZMQ keys and the authenticator that admits authorised clients;
- context.py: the process's ZeroMQ context and the transport's error.
"""
from psgd.wire.keys.files import KeyFileExists
from psgd.wire.transport.context import TransportError, tcp_address, zmq_context, zmq_versions
from psgd.wire.transport.curve import CurveKeys, client_keys, curve_round_trip, generate_keys, server_keys
from psgd.wire.transport.sockets import PEER_SEND_HWM, SendTracker, ServerSocket, ShardConnections, loopback_pipe

__all__ = ["zmq_versions", "loopback_pipe", "curve_round_trip", "ServerSocket", "ShardConnections", "SendTracker",
           "TransportError", "tcp_address", "CurveKeys", "generate_keys", "KeyFileExists", "PEER_SEND_HWM",
           "server_keys", "client_keys", "zmq_context"]
