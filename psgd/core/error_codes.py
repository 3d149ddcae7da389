"""Every code an ERROR reply or a refused control change carries, named once.

The wire holds the value (psgd.wire.protocol sends it); it lives below the wire
so that socket-free policy (core.live_settings) can refuse a change with the
same code a shard replies with.
"""
from __future__ import annotations

from enum import Enum

__all__ = ["ErrorCode"]


class ErrorCode(str, Enum):
    """Every code an ERROR reply or a refused control change carries; the wire holds the value."""

    def __str__(self) -> str:  # f"{code}" is the wire value on every Python version
        return self.value

    BAD_CLOCK = "bad_clock"
    BAD_ENCODING = "bad_encoding"
    BAD_FIELD = "bad_field"
    BAD_FRAMES = "bad_frames"
    BAD_HEADER = "bad_header"
    BAD_INDEX = "bad_index"
    BAD_KEY = "bad_key"
    BAD_MODE = "bad_mode"
    BAD_NAME = "bad_name"
    BAD_OP = "bad_op"
    BAD_RANK = "bad_rank"
    BAD_ROLE = "bad_role"
    BAD_SEGMENT = "bad_segment"
    BAD_SEQ = "bad_seq"
    BAD_SHM = "bad_shm"
    BAD_SIZE = "bad_size"
    BAD_TOKEN = "bad_token"
    BAD_TYPE = "bad_type"
    BAD_VALUE = "bad_value"
    BAD_VERSION = "bad_version"
    BUSY = "busy"
    NOT_OWNER = "not_owner"
    NO_SPACE = "no_space"
    CREATE_FAILED = "create_failed"
    EMPTY = "empty"
    HEADER_TOO_LARGE = "header_too_large"
    LAYOUT_MISMATCH = "layout_mismatch"
    NO_TOKEN = "no_token"
    NOT_A_REQUEST = "not_a_request"
    NOT_HERE = "not_here"
    NOT_OURS = "not_ours"
    NOT_PREPARED = "not_prepared"
    NOT_REGISTERED = "not_registered"
    MISSING_PIECES = "missing_pieces"
    RANK_BOUND = "rank_bound"
    TOO_LATE = "too_late"
    TOO_SMALL = "too_small"
    UNAUTHORIZED = "unauthorized"
