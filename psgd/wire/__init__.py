"""The wire: protocol (the bytes), codecs, transport (the only zmq code), request tracking, CurveZMQ."""
