"""Config sections about how a run is carried out rather than what it trains:
the wire, checkpoints, supervision, security, Ray resources and logging."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Optional, Sequence, Union

from psgd.config.loader import check as _check
from psgd.config.loader import int_max, renamed_words

# wire.shared_memory_min_bytes' default: the smallest shard `psgd bench comm` measured where
# shared memory with its doorbell beat loopback TCP (0.79x at 4 KiB, benchmarks/comm/report.md).
# Below it nothing was measured, and a segment reserves at least two pages anyway.
SHARED_MEMORY_MIN_BYTES = 4 << 10

__all__ = ["WireConfig", "CODEC_WORDS", "CODEC_WORDS_BEFORE", "Compression", "REPLY_COMPRESSIONS", "ChooseBy", "CompressionChoice", "CheckpointConfig", "SupervisionConfig", "SecurityConfig", "RayRoleConfig", "RayConfig",
           "RayScheduling",
           "LoggingConfig"]


# wire.compression's words, one per codec (psgd/wire/codecs/, one module per codec, each naming its
# word: the registry checks at import that the two agree), each with whether it is ruled out for
# replies (one reply goes to many workers and becomes their model): it keeps an error-feedback
# residual per receiver, or sends only some coordinates.
CODEC_WORDS: dict[str, bool] = {"none": False, "fp16": False, "bf16": False, "topk": True, "int8": False,
                                "int4": False, "int2_ef": True, "topk_int2": True}
Compression = Literal[tuple(CODEC_WORDS)]  # type: ignore[valid-type]  # the words above
# What the wire called three codecs before each codec had one word: a config that writes one
# is told the word (fp32 is `none`: nothing is compressed).
CODEC_WORDS_BEFORE = {"f32": "none", "fp32": "none", "f16": "fp16", "int2ef": "int2_ef"}
renamed_words(Compression, CODEC_WORDS_BEFORE)
# The values a reply (pulled parameters) may use: the codecs that keep no state.
REPLY_COMPRESSIONS: tuple[str, ...] = tuple(word for word, not_for_replies in CODEC_WORDS.items() if not not_for_replies)


class ChooseBy(str, Enum):
    """What `wire.compression`'s size rule (small, small_below) looks at."""
    SHARD = "shard"    # the shard's flat tensor: one encoding per push
    TENSOR = "tensor"  # each parameter tensor: a push carries one run per stretch of tensors with one encoding

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CompressionChoice:
    """`wire.compression` as a mapping: the encoding chosen per shard (each shard's
    push is one flat tensor with one encoding on the wire), or under choose_by: tensor
    per parameter tensor (a push then carries one encoded run per stretch of tensors),
    by its size and by what the run pushes, as hivemind's SizeAdaptiveCompression /
    RoleAdaptiveCompression do. A shard (tensor) of fewer than `small_below` elements uses
    `small`; otherwise a run with local updates uses `deltas`; anything left uses `default`. `replies` is the
    parameters' encoding in a shard's answers to workers' pulls (its role)."""
    default: Compression = "none"           # every shard the keys below do not choose for
    small: Optional[Compression] = None     # shards (tensors, by tensor) below small_below elements (None: as the others)
    # elements of a shard's flat tensor (choose_by: tensor: of each parameter tensor)
    small_below: int = field(default=4096, metadata=int_max(2**31 - 1))
    deltas: Optional[Compression] = None    # local-update pushes (None: default)
    # The parameters in a shard's answers to a worker's registration and pulls (None: fp32, as before).
    # Only a codec that keeps no state (no error feedback). The evaluator's pulls stay fp32.
    replies: Optional[Compression] = None
    # What small_below measures: each shard's flat tensor (shard), or each parameter tensor (tensor: a
    # shard's push carries several encoded runs, one per stretch of consecutive tensors with one encoding).
    choose_by: ChooseBy = ChooseBy.SHARD

    def __post_init__(self):
        _check(self.small_below >= 0, "small_below", f"must be >= 0, got {self.small_below}")
        _check(self.replies is None or self.replies in REPLY_COMPRESSIONS, "replies",
               f"{self.replies} keeps a residual per receiver or sends only some coordinates, which a reply "
               f"to many workers cannot: use one of {', '.join(REPLY_COMPRESSIONS)}")

    def for_shard(self, numel: int, local_updates: bool) -> str:
        """The `wire.compression` value for one shard's pushes."""
        if self.small is not None and numel < self.small_below:
            return self.small
        if local_updates and self.deltas is not None:
            return self.deltas
        return self.default

    def for_tensors(self, pieces: Sequence[tuple[int, int]], local_updates: bool) -> list[tuple[str, int]]:
        """One shard's runs under choose_by: tensor: `pieces` are (the parameter tensor's
        elements, how many of them lie on the shard) in shard order; returns (the
        `wire.compression` value, elements) per run, consecutive pieces with one value merged."""
        runs: list[tuple[str, int]] = []
        for tensor_numel, length in pieces:
            value = self.for_shard(tensor_numel, local_updates)
            if runs and runs[-1][0] == value:
                runs[-1] = (value, runs[-1][1] + length)
            else:
                runs.append((value, length))
        return runs


@dataclass(frozen=True)
class WireConfig:
    # Each push's codec: one for every shard (none: fp32; each codec's module in psgd/wire/codecs/ says
    # what it sends), or a mapping
    # {default, small, small_below, deltas, replies, choose_by} choosing per shard: shards of fewer than small_below
    # (4096) elements use small, local-update deltas use deltas, the rest default; replies: the parameters
    # workers pull (a codec without error feedback; unset: fp32); choose_by: tensor applies small_below to
    # each parameter tensor instead, a push then carrying one encoded run per stretch of tensors (CompressionChoice).
    compression: Union[Compression, CompressionChoice] = "none"
    topk_ratio: float = 0.01     # topk: fraction of each shard's coordinates sent per push
    max_message_mb: int = field(default=1024, metadata=int_max(2047))  # sockets refuse larger messages (< 2 GiB)
    # Same-host data path: "auto" moves gradients and parameters through a shared-memory
    # segment per connection where client and shard share a host (TCP otherwise, and in
    # CurveZMQ-secured runs); "off" keeps every byte on the socket.
    # (YAML reads a bare `off` as false: false means "off", true means "auto".)
    shared_memory: Union[Literal["auto", "off"], bool] = "auto"
    # Under "auto", only connections to shards of at least this many fp32 bytes use shared
    # memory (see SHARED_MEMORY_MIN_BYTES). 0: every same-host connection.
    shared_memory_min_bytes: int = field(default=SHARED_MEMORY_MIN_BYTES, metadata=int_max(2**31 - 1))

    def __post_init__(self):
        _check(0 < self.topk_ratio <= 1, "topk_ratio", f"must be in (0, 1], got {self.topk_ratio}")
        _check(self.max_message_mb >= 1, "max_message_mb", "must be >= 1")
        _check(self.shared_memory_min_bytes >= 0, "shared_memory_min_bytes", "must be >= 0")
        if isinstance(self.shared_memory, bool):
            object.__setattr__(self, "shared_memory", "auto" if self.shared_memory else "off")

    def compression_for(self, shard_sizes, local_updates: bool) -> list[str]:
        """The `compression` value each shard's pushes use."""
        choice = self.compression
        if isinstance(choice, str):
            return [choice] * len(shard_sizes)
        return [choice.for_shard(n, local_updates) for n in shard_sizes]

    def compression_runs(self, shard_pieces: Sequence[Sequence[tuple[int, int]]],
                         local_updates: bool) -> list[list[tuple[str, int]]]:
        """Per shard, its pushes' runs as (`compression` value, elements): one run of the shard's
        value under choose_by: shard; `shard_pieces`: per shard, (tensor elements, elements on
        the shard) of each piece of a parameter it holds, in shard order."""
        choice = self.compression
        if isinstance(choice, CompressionChoice) and choice.choose_by is ChooseBy.TENSOR:
            return [choice.for_tensors(pieces, local_updates) for pieces in shard_pieces]
        sizes = [sum(n for _, n in pieces) for pieces in shard_pieces]
        return [[(value, n)] for value, n in zip(self.compression_for(sizes, local_updates), sizes)]

    @property
    def reply_compression(self) -> str:
        """The `compression` value of the parameters a shard sends a worker's pull ("none": fp32)."""
        choice = self.compression
        return "none" if isinstance(choice, str) or choice.replies is None else choice.replies


@dataclass(frozen=True)
class CheckpointConfig:
    # Shard snapshots under RUN_DIR/checkpoints/: every N updates or T seconds,
    # whichever comes first, plus one on a clean stop. Pushes applied since the
    # last snapshot go to an append-only log, written before they are
    # acknowledged, so a killed shard replays them on restart.
    enabled: bool = True
    every_updates: int = 500     # snapshot after this many updates (0: never by count)
    every_s: float = 10.0        # snapshot after this many seconds (0: never by time)
    fsync_log: bool = False      # fsync each log record (survives power loss, not just a process kill)
    max_log_mb: int = 1024       # snapshot early once the log (one gradient per push) reaches this size

    def __post_init__(self):
        _check(self.every_updates >= 0, "every_updates", "must be >= 0")
        _check(self.every_s >= 0, "every_s", "must be >= 0")
        _check(self.max_log_mb >= 1, "max_log_mb", "must be >= 1")


@dataclass(frozen=True)
class SupervisionConfig:
    # The launcher restarts a crashed server or worker up to max_restarts times
    # per process, waiting backoff_s * 2**k before a restart, k counting the
    # process's restarts since it last ran backoff_reset_s without crashing.
    max_restarts: int = 3
    backoff_s: float = 0.5       # seconds before the first restart, doubled for each next one
    backoff_reset_s: float = 10.0  # a process that ran this long since its restart is healthy: back to backoff_s

    def __post_init__(self):
        _check(self.max_restarts >= 0, "max_restarts", "must be >= 0")
        _check(self.backoff_s >= 0, "backoff_s", "must be >= 0")
        _check(self.backoff_reset_s >= 0, "backoff_reset_s", "must be >= 0")


@dataclass(frozen=True)
class SecurityConfig:
    # CurveZMQ: encrypt all traffic and accept only clients whose public key is
    # in KEYS_DIR/authorized/ (keys made by `psgd keys generate KEYS_DIR`).
    curve: bool = False
    keys_dir: str = "keys"       # relative paths are resolved against the config file's directory
    client_key: str = ""         # a client's key pair (*.key_secret); default KEYS_DIR/client.key_secret


class RayScheduling(str, Enum):
    """How Ray chooses among the nodes that can hold a role's processes."""
    SPREAD = "spread"    # over as many nodes as it can (Ray's SPREAD strategy)
    DEFAULT = "default"  # Ray's default: fill one node (the driver's first) before the next

    def __str__(self) -> str:
        return self.value


# Ray's built-in resources, which num_cpus / num_gpus (and Ray itself) set.
_RAY_BUILTIN = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": None, "object_store_memory": None}


@dataclass(frozen=True)
class RayRoleConfig:
    # Resources Ray reserves for each process of this role (logical units, as in
    # @ray.remote(num_cpus=..., num_gpus=...)); a role's torch threads are run.threads.
    num_cpus: float = 1.0
    num_gpus: float = 0.0        # GPUs per process (give GPU workers 1)
    # Custom resources each process also asks for: the role goes only to nodes that have them
    # (`ray start --resources='{"node_a": 8}'`), or to one node with Ray's {"node:IP": 0.01}.
    resources: dict[str, float] = field(default_factory=dict)
    scheduling: RayScheduling = RayScheduling.SPREAD  # among the nodes that can hold the role

    def __post_init__(self):
        _check(self.num_cpus >= 0, "num_cpus", f"must be >= 0, got {self.num_cpus}")
        _check(self.num_gpus >= 0, "num_gpus", f"must be >= 0, got {self.num_gpus}")
        for name, amount in self.resources.items():
            key = f"resources.{name}"
            _check(bool(name.strip()), "resources", "a resource name must not be empty")
            if name in _RAY_BUILTIN:
                instead = _RAY_BUILTIN[name]
                _check(False, key, f"{name} is Ray's own resource" + (f": set {instead} instead" if instead else ""))
            _check(amount > 0, key, f"must be > 0, got {amount:g}")
            # Ray's rule: a quantity above 1 is a whole number of units.
            _check(amount <= 1 or math.isclose(amount, round(amount)), key,
                   f"above 1 must be a whole number (Ray's rule), got {amount:g}")


@dataclass(frozen=True)
class RayConfig:
    # `psgd launch --on ray` (or cluster.launcher: ray). address "": join RAY_ADDRESS if set,
    # else start a local Ray instance sized to fit the job; "auto", "HOST:6379" or
    # "ray://HOST:10001": join that cluster.
    address: str = ""
    server: RayRoleConfig = field(default_factory=RayRoleConfig)
    worker: RayRoleConfig = field(default_factory=RayRoleConfig)
    evaluator: RayRoleConfig = field(default_factory=RayRoleConfig)


@dataclass(frozen=True)
class LoggingConfig:
    # Every run writes metrics.jsonl and metrics.csv (one row per evaluation);
    # tensorboard: true also writes TensorBoard event files under RUN_DIR/tensorboard
    # (needs the `tensorboard` package: pip install 'psgd[tensorboard]').
    tensorboard: bool = False
