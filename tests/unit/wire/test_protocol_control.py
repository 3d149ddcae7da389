"""The CONTROL records and Push.step_s on the wire."""
import msgpack
import pytest

from psgd.wire import protocol as P
from psgd.wire.payload import payload_frames


def test_control_and_reply_round_trip():
    rec = P.Control(req=7, op="commit", token="t0k", clock=42, settings={"consistency.staleness": "4"})
    back, payload = P.decode(P.encode(rec))
    assert back == rec and payload == []
    reply = P.ControlReply(req=7, clock=42, detail={"mode": "ssp", "bound": 4})
    assert P.decode(P.encode(reply))[0] == reply
    push = P.Push(req=1, rank=0, seq=3, clock=3, numel=4, step_s=0.0125)
    assert P.decode(P.encode(push, [b"\0" * 16]))[0].step_s == 0.0125
    assert payload_frames(rec) == 0 and payload_frames(reply) == 0


@pytest.mark.parametrize("fields", [{"settings": ["consistency.staleness", 4]}, {"token": 5}, {"clock": "3"},
                                    {"op": None}])
def test_badly_typed_control_fields_are_refused(fields):
    header = msgpack.packb([P.PROTOCOL_VERSION, int(P.MsgType.CONTROL), 1, fields], use_bin_type=True)
    with pytest.raises(P.ProtocolError) as exc:
        P.decode([header])
    assert exc.value.code == "bad_field"


def test_step_s_must_be_a_number():
    header = msgpack.packb([P.PROTOCOL_VERSION, int(P.MsgType.PUSH), 1, {"step_s": "fast"}], use_bin_type=True)
    with pytest.raises(P.ProtocolError, match="step_s"):
        P.decode([header, b""])
