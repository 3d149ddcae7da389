"""The wire contract: every byte psgd puts on a socket is defined here.

A message is a list of frames: one msgpack header
``[PROTOCOL_VERSION, type, request_id, {field: value}]`` followed by zero or
more raw tensor frames (little-endian, C order), sent zero-copy when large.
A gradient's frames are its codec's (psgd.wire.codecs, named by the push's
`encoding`; psgd.wire.payload.payload_frames counts them): a dense gradient is
one frame; top-k's is two, the int32 indices then the float32 values of its
`nnz` kept coordinates. A push in runs (encoding "runs", wire.compression.choose_by:
tensor) carries several codecs' frames one after another, its header's `runs`
naming each run's encoding, scale and nnz. A dense
gradient may also travel in pieces (push during backward): messages with
`held` true carry [offset, offset + numel) of it and are not answered; the
push's last message (`held` false) carries the rest, and the shard applies the
whole gradient once, as if it had come in one message.
Nothing is ever pickled. `decode` checks version, type, field names and field
types and raises ProtocolError with a reason; checks against the parameter
layout (sizes, shard) belong to the server.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, Sequence

import msgpack

from psgd.core.error_codes import ErrorCode  # the codes the ERROR reply carries

PROTOCOL_VERSION = 1
MAX_HEADER_BYTES = 64 * 1024


class MsgType(IntEnum):
    REGISTER = 1     # client -> shard: join as worker or evaluator; layout fingerprint checked
    WELCOME = 2      # shard -> client: registration accepted; parameter frame follows
    PULL = 3         # client -> shard: read parameters (a worker's pull may be deferred by SSP/BSP)
    PUSH = 4         # client -> shard: gradient frame(s); answered with ACK
    PUSH_PULL = 5    # client -> shard: gradient, then read parameters; answered with PARAMS
    PARAMS = 6       # shard -> client: parameter frame with version and clocks
    ACK = 7          # shard -> client: push handled (applied, dropped, or recognised as a retry)
    HEARTBEAT = 8    # client -> shard: still alive; never answered
    LEAVE = 9        # client -> shard: worker is done and leaves the quorum; answered with ACK
    STATS = 10       # client -> shard: ask for counters; answered with STATS_REPLY
    STATS_REPLY = 11  # shard -> client: counters and histograms
    SHUTDOWN = 12    # client -> shard: stop serving; answered with ACK
    ERROR = 13       # shard -> client: request refused; carries code and reason
    CONTROL = 14     # controller -> shard: show/prepare/commit/abort a live change; carries the run token
    CONTROL_REPLY = 15  # shard -> controller: the clock of a prepared or committed change, and settings


class ProtocolError(ValueError):
    """A message that does not follow this module's contract."""

    def __init__(self, code: ErrorCode | str, reason: str):
        self.code = code
        self.reason = reason
        super().__init__(f"{code}: {reason}")


@dataclass(frozen=True)
class Record:
    TYPE: ClassVar[MsgType]
    req: int = 0  # request id, echoed in the reply so clients can match it


@dataclass(frozen=True)
class Register(Record):
    TYPE: ClassVar[MsgType] = MsgType.REGISTER
    rank: int = 0
    role: str = "worker"        # worker | evaluator
    fingerprint: str = ""
    token: str = ""             # the run token: lets a worker take over a rank bound to another connection
    shm: str = ""               # offered shared-memory segment (psgd.wire.shm.segment), "" for none
    shm_token: str = ""         # hex token the segment's header must carry
    bell: str = ""              # offered doorbell (psgd.wire.shm.doorbell) for the segment's connection, "" for none


@dataclass(frozen=True)
class Welcome(Record):
    TYPE: ClassVar[MsgType] = MsgType.WELCOME
    shard: int = 0
    version: int = 0            # updates applied to this shard so far
    clock: int = 0              # clock the worker continues from
    last_seq: int = -1          # last push seq applied for this worker (for resumed clients)
    session: str = ""           # workers: heartbeats for the rank must carry this
    shm: bool = False           # the offered segment is attached: payloads may travel through it
    bell: bool = False          # the offered doorbell is open: header-only messages may ring it
    encoding: str = "none"      # the parameters' encoding, as in PARAMS (a worker's: wire.compression.replies)
    scale: float = 1.0          # dense encodings: value = wire * scale


@dataclass(frozen=True)
class Pull(Record):
    TYPE: ClassVar[MsgType] = MsgType.PULL
    rank: int = 0
    clock: int = 0
    slot: int = 0               # the shared-memory reply slot the parameters go to (psgd.wire.shm.segment.REPLY_SLOTS)


@dataclass(frozen=True)
class Push(Record):
    TYPE: ClassVar[MsgType] = MsgType.PUSH
    rank: int = 0
    seq: int = 0                # per-worker sequence number; a resend reuses it
    clock: int = 0              # worker clock this gradient belongs to
    read_version: int = 0       # shard version of the parameters the gradient was computed on
    encoding: str = "none"      # a codec's word (psgd.wire.codecs): its frames follow
    scale: float = 1.0
    numel: int = 0              # elements of the (dense) gradient
    nnz: int = 0                # sparse encodings: coordinates carried
    shm: int = 0                # >0: the dense payload lies in the segment at this generation; no frame follows
    step_s: float = 0.0         # the worker's step time before this push (0: not measured)
    steps: int = 1              # training steps behind this push (local updates: the round's)
    # Pieces (PIECE_FIELDS; absent from the header at their defaults, so shards that predate them read
    # every push that does not use them): numel then counts this payload's elements.
    offset: int = 0             # the payload's first element within the shard's gradient
    held: bool = False          # a piece the shard keeps, unanswered, until the push's last message
    # A push in runs (encoding "runs", psgd.wire.codecs.runs): [encoding, scale, nnz] per run, its frames
    # the runs' in order; absent from the header when empty.
    runs: list = ()


PIECE_FIELDS = ("offset", "held")


def is_piece(push: Push, shard_numel: int) -> bool:
    """Whether `push` is one piece of a gradient rather than all of it."""
    return push.held or push.offset != 0 or push.numel != shard_numel


@dataclass(frozen=True)
class PushPull(Push):
    TYPE: ClassVar[MsgType] = MsgType.PUSH_PULL
    ahead: int = 1              # the pull is for clock + ahead (2: a pipelined worker uses it a step later)
    slot: int = 0               # the shared-memory reply slot the parameters go to (psgd.wire.shm.segment.REPLY_SLOTS)


@dataclass(frozen=True)
class Params(Record):
    TYPE: ClassVar[MsgType] = MsgType.PARAMS
    version: int = 0
    clock: int = 0              # the requester's clock as the shard sees it
    min_clock: int = 0          # slowest live worker's clock when answered
    encoding: str = "none"      # a codec's word (wire.compression.replies; psgd.wire.replies): its frames follow
    scale: float = 1.0          # dense encodings: value = wire * scale
    numel: int = 0
    shm: bool = False           # the parameters lie in the segment's reply region, stamped with req; no frame
    fastest_step_s: float = 0.0  # the fastest live worker's latest time per training step (0: not known)
    # Seconds the pull stayed parked on the shard (a BSP barrier, an SSP bound); absent from the
    # header at 0, so a worker that predates it reads every pull answered at once.
    held_s: float = 0.0


@dataclass(frozen=True)
class Ack(Record):
    TYPE: ClassVar[MsgType] = MsgType.ACK
    version: int = 0
    applied: bool = True
    staleness: int = 0


@dataclass(frozen=True)
class Heartbeat(Record):
    TYPE: ClassVar[MsgType] = MsgType.HEARTBEAT
    rank: int = 0
    session: str = ""           # from the rank's WELCOME (heartbeats come from another socket)


@dataclass(frozen=True)
class Leave(Record):
    TYPE: ClassVar[MsgType] = MsgType.LEAVE
    rank: int = 0


@dataclass(frozen=True)
class Stats(Record):
    TYPE: ClassVar[MsgType] = MsgType.STATS


@dataclass(frozen=True)
class StatsReply(Record):
    TYPE: ClassVar[MsgType] = MsgType.STATS_REPLY
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Shutdown(Record):
    TYPE: ClassVar[MsgType] = MsgType.SHUTDOWN
    token: str = ""             # the run token (RUN_DIR/run.token)


@dataclass(frozen=True)
class Control(Record):
    TYPE: ClassVar[MsgType] = MsgType.CONTROL
    op: str = "show"            # show | prepare | commit | abort
    token: str = ""             # the run token (RUN_DIR/run.token)
    clock: int = 0              # commit: the effective clock
    settings: dict = field(default_factory=dict)  # key -> value, as `psgd ctl set` takes them
    owner: str = ""             # the controller's id: only the one holding a shard commits or aborts there


@dataclass(frozen=True)
class ControlReply(Record):
    TYPE: ClassVar[MsgType] = MsgType.CONTROL_REPLY
    clock: int = 0              # prepare: the first clock held; commit: the effective clock
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Error(Record):
    TYPE: ClassVar[MsgType] = MsgType.ERROR
    code: str = "error"
    reason: str = ""


RECORDS: dict[MsgType, type[Record]] = {
    cls.TYPE: cls
    for cls in (Register, Welcome, Pull, Push, PushPull, Params, Ack, Heartbeat, Leave,
                Stats, StatsReply, Shutdown, Control, ControlReply, Error)
}
# Every message type has exactly one record: checked once, at import.
if set(RECORDS) != set(MsgType):
    raise ImportError(f"message types without a record: {set(MsgType) - set(RECORDS)}")

_FIELDS = {t: {f.name: f.type for f in dataclasses.fields(cls)} for t, cls in RECORDS.items()}
# Per type, computed once (encode/decode run for every message): the header fields.
_HEADER_FIELDS = {t: tuple(f for f in spec if f != "req") for t, spec in _FIELDS.items()}
# msgpack yields exact builtin types, so an exact type test is the whole check
# (and keeps True out of int fields): field -> the types it accepts.
_EXACT = {"int": frozenset({int}), "str": frozenset({str}), "bool": frozenset({bool}),
          "float": frozenset({float, int}), "dict": frozenset({dict}), "list": frozenset({list})}
_CHECKS = {t: {f: _EXACT[spec[f]] for f in _HEADER_FIELDS[t]} for t, spec in _FIELDS.items()}
# Records are built without running the dataclass __init__ (decode runs for every
# message): defaults per type, except for types with a default factory.
_DEFAULTS = {t: {f.name: f.default for f in dataclasses.fields(cls)} for t, cls in RECORDS.items()
             if all(f.default is not dataclasses.MISSING for f in dataclasses.fields(cls))}


_NAMES = {t: frozenset(spec) for t, spec in _FIELDS.items()}


def build(cls: type[Record], **fields: Any):
    """`cls(**fields)`, made as decode makes records (a frozen dataclass's own __init__ sets
    each field through object.__setattr__: several times the cost, on every request's path).
    Only for records whose fields all have plain defaults; a name the record lacks is a TypeError."""
    if not _NAMES[cls.TYPE].issuperset(fields):
        raise TypeError(f"{cls.__name__} has no field {sorted(set(fields) - _NAMES[cls.TYPE])[0]!r}")
    record = object.__new__(cls)
    state = record.__dict__
    state.update(_DEFAULTS[cls.TYPE])
    state.update(fields)
    return record


# Field shapes (type, names in order, value types) that passed _check_fields. Only shapes that
# pass are kept, and at most MAX_GOOD_SHAPES of them (the fields a client sends vary little).
_GOOD_SHAPES: set = set()
MAX_GOOD_SHAPES = 1024


def _check_fields(mtype: int, fields: dict) -> None:
    checks = _CHECKS[mtype]
    for name, value in fields.items():
        check = checks.get(name)
        if check is None:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"unknown field {name!r} for {MsgType(mtype).name}")
        if type(value) not in check:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"field {name!r} must be {_FIELDS[mtype][name]}")


# One packer, reused for push headers: msgpack.packb builds a Packer per call. Safe from any
# thread with msgpack's C packer because a push header holds only exact builtin values (packing
# them runs no Python code, so the GIL is never given up inside one pack), and autoreset leaves
# no state behind; msgpack's pure-Python fallback packs in Python, so there each call gets its own.
_pack_push = (msgpack.Packer(use_bin_type=True).pack if msgpack.Packer.__module__ == "msgpack._cmsgpack"
              else functools.partial(msgpack.packb, use_bin_type=True))
_PUSH, _PUSH_PULL = int(MsgType.PUSH), int(MsgType.PUSH_PULL)  # plain ints: an enum's .value is two Python calls


def encode(record: Record, frames: Sequence[Any] = ()) -> list:
    """Header bytes followed by the given payload frames (buffers, not copied)."""
    if isinstance(record, Push):
        return encode_push(type(record), frames, **record.__dict__)
    fields = record.__dict__.copy()  # the dataclass fields, in order
    req = fields.pop("req")
    if isinstance(record, Params) and not record.held_s:
        del fields["held_s"]
    header = msgpack.packb([PROTOCOL_VERSION, int(record.TYPE), req, fields], use_bin_type=True)
    return [header, *frames]


def encode_push(kind: type[Push], frames: Sequence[Any], req: int, rank: int, seq: int, clock: int,
                read_version: int, encoding: str, scale: float, numel: int, nnz: int = 0, shm: int = 0,
                step_s: float = 0.0, steps: int = 1, offset: int = 0, held: bool = False, runs: list = (),
                ahead: int = 1, slot: int = 0) -> list:
    """`encode(kind(req=req, ...), frames)` without making the record: a worker's push header,
    built straight from its values (a push's hot path). `kind`: Push or PushPull (`ahead`
    and `slot` are PushPull's). The header's fields in the record's order; a whole gradient's
    leaves out the piece fields, and one not in runs `runs` (the header an older shard knows)."""
    fields = {"rank": rank, "seq": seq, "clock": clock, "read_version": read_version, "encoding": encoding,
              "scale": scale, "numel": numel, "nnz": nnz, "shm": shm, "step_s": step_s, "steps": steps}
    if held or offset:
        fields["offset"], fields["held"] = offset, held
    if runs:
        fields["runs"] = runs
    if kind is PushPull:
        fields["ahead"], fields["slot"] = ahead, slot
        mtype = _PUSH_PULL
    elif kind is Push:
        mtype = _PUSH
    else:
        raise TypeError(f"encode_push encodes PUSH and PUSH_PULL, not {kind.__name__}")
    return [_pack_push([PROTOCOL_VERSION, mtype, req, fields]), *frames]


def decode(frames: Sequence[Any]) -> tuple[Record, list]:
    """Parse a message into (record, payload frames). Raises ProtocolError."""
    if not frames:
        raise ProtocolError(ErrorCode.EMPTY, "message has no frames")
    head = memoryview(frames[0])
    if head.nbytes > MAX_HEADER_BYTES:
        raise ProtocolError(ErrorCode.HEADER_TOO_LARGE, f"header is {head.nbytes} bytes")
    try:
        obj = msgpack.unpackb(head, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage input
        raise ProtocolError(ErrorCode.BAD_HEADER, f"header is not msgpack: {type(exc).__name__}") from None
    # msgpack yields exact builtin types (a bool is never an int here): exact type tests, no isinstance calls.
    if type(obj) is not list or len(obj) != 4:
        raise ProtocolError(ErrorCode.BAD_HEADER, "header must be [version, type, request_id, fields]")
    version, mtype, req, fields = obj
    if type(version) is not int or version != PROTOCOL_VERSION:  # True == 1, but is not a version
        raise ProtocolError(ErrorCode.BAD_VERSION, f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    if type(mtype) is not int or mtype not in RECORDS:
        raise ProtocolError(ErrorCode.BAD_TYPE, f"unknown message type {mtype!r}")
    if type(req) is not int or not (0 <= req < 2**63):
        raise ProtocolError(ErrorCode.BAD_HEADER, "request id must be a non-negative integer")
    if type(fields) is not dict:
        raise ProtocolError(ErrorCode.BAD_HEADER, "fields must be a mapping")
    # A sender repeats the same field names and types message after message: a shape checked
    # once is known good (two tuples built in C and one lookup instead of a loop over the fields).
    shape = (mtype, tuple(fields), tuple(map(type, fields.values())))
    if shape not in _GOOD_SHAPES:
        _check_fields(mtype, fields)
        if len(_GOOD_SHAPES) < MAX_GOOD_SHAPES:
            _GOOD_SHAPES.add(shape)
    defaults = _DEFAULTS.get(mtype)
    if defaults is None:
        return RECORDS[mtype](req=req, **fields), list(frames[1:])
    record = object.__new__(RECORDS[mtype])
    state = record.__dict__
    state.update(defaults)
    state.update(fields)
    state["req"] = req
    return record, list(frames[1:])


_UINT = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}  # msgpack unsigned int markers -> bytes that follow


def request_id(frames: Sequence[Any]) -> int:
    """The request id of a message this process encoded (no validation). Read
    from the header's first bytes ([version, type, req, ...] packs as a 4-array,
    two small ints, then req) rather than unpacking the whole header."""
    head = frames[0]
    if head[0] == 0x94 and head[1] < 0x80 and head[2] < 0x80:
        marker = head[3]
        if marker < 0x80:
            return marker
        size = _UINT.get(marker)
        if size is not None:
            return int.from_bytes(head[4:4 + size], "big")
    return msgpack.unpackb(frames[0])[2]
