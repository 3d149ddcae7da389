"""Run configuration: a tree of frozen dataclasses with commented defaults.

`load_config` reads YAML, applies `--set a.b=value` overrides, rejects unknown
keys with their full path and validates every value, raising `ConfigError`
(a ValueError) before any process is started.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import yaml

from psgd.config.cross_section import check_across_sections
from psgd.config.elastic import MAX_WORKERS, WorkerRange
from psgd.config.loader import ConfigError, build, int_max, parse_override, set_path
from psgd.config.loader import check as _check
from psgd.config.local_updates import LocalConfig
from psgd.config.modes import MODES, PS_MODES, Mode  # noqa: F401 (re-exported)
from psgd.config.operations import (  # noqa: F401 (re-exported)
    CheckpointConfig,
    LoggingConfig,
    RayConfig,
    RayRoleConfig,
    RayScheduling,
    SecurityConfig,
    SupervisionConfig,
    WireConfig,
)
from psgd.config.optimizer import DcAsgdConfig, OptimizerConfig, ScheduleConfig  # noqa: F401 (re-exported)
from psgd.config.quorum import QuorumConfig  # noqa: F401 (re-exported)
from psgd.config.sim import SimConfig  # noqa: F401 (re-exported)
from psgd.config.task_sources import spec_refusal
from psgd.config.workers import DelayConfig, LoaderConfig, TransientConfig, WorkersConfig  # noqa: F401 (re-exported)

__all__ = ["Config", "ConfigError", "ConfigLike", "load_config", "override_config", "config_to_dict", "dump_config"]




@dataclass(frozen=True)
class RunConfig:
    name: str = "run"            # run directory prefix
    seed: int = 0                # seeds model init, data split and shuffling
    out_dir: str = "runs"        # parent of run directories
    threads: int = field(default=1, metadata=int_max(1024))  # torch threads per process (cores are shared)
    # How `psgd launch` starts its children: fork (Linux; from the launcher, which has
    # torch and the task loaded already: fast) or exec (a fresh `python -m psgd.cli`).
    start_method: Literal["fork", "exec"] = "fork"
    # Each shard records the order of its state changes (no gradients) in RUN_DIR/record/,
    # so `psgd replay RUN_DIR` can re-execute the run bit for bit.
    record: bool = True

    def __post_init__(self):
        _check(bool(self.name) and "/" not in self.name, "name", "must be a non-empty name without '/'")
        _check(self.threads >= 1, "threads", f"must be >= 1, got {self.threads}")

MAX_REPLICAS = 8  # backups per shard: each is a process holding a copy of the shard


@dataclass(frozen=True)
class ClusterConfig:
    # Either a shard count (the launcher picks free ports on `host`) or the
    # explicit "host:port" of every shard, for runs across machines.
    servers: Union[int, list[str]] = field(default=2, metadata=int_max(4096))
    # Worker processes, ranks 0..workers-1; or a range {min, max} (elastic workers: the run
    # starts with min, keeps at least min, and grows to at most max while it runs).
    workers: Union[int, WorkerRange] = field(default=4, metadata=int_max(MAX_WORKERS))
    # The range's min (None: a fixed count); `workers` then holds its max. Set from the range.
    workers_min: Optional[int] = field(default=None, metadata={"internal": True})
    host: str = "127.0.0.1"      # bind/connect address for launcher-picked ports
    timeout_s: float = 10.0      # a worker silent this long leaves the quorum
    heartbeat_s: float = 1.0     # worker heartbeat period
    request_timeout_s: float = 30.0  # client resends (same seq) after this
    max_retries: int = 5         # resends before a request fails
    # Backups per shard (primary-backup by log shipping, servers/standby.py): each follows its
    # primary's checkpoint log and the first to bind the address takes over when the primary dies.
    replicas: int = field(default=0, metadata=int_max(MAX_REPLICAS))
    allreduce_port: int = 0      # torch.distributed rendezvous port (0: the launcher picks one)
    # What `psgd launch` starts the processes with: the name of a module in
    # psgd/orchestrate/launchers/ (`psgd launch --help` lists them), checked when a job is launched.
    launcher: str = "local"

    def __post_init__(self):
        if isinstance(self.servers, int):
            _check(self.servers >= 1, "servers", f"must be >= 1, got {self.servers}")
        else:
            _check(len(self.servers) >= 1, "servers", "needs at least one host:port")
            for i, addr in enumerate(self.servers):
                host, _, port = addr.rpartition(":")
                _check(bool(host) and port.isdigit() and 0 < int(port) < 65536,
                       f"servers[{i}]", f"expected host:port, got {addr!r}")
        if isinstance(self.workers, WorkerRange):  # every reader of `workers` gets the rank count
            object.__setattr__(self, "workers_min", self.workers.min)
            object.__setattr__(self, "workers", self.workers.max)
        _check(self.workers >= 1, "workers", f"must be >= 1, got {self.workers}")
        if self.workers_min is not None:  # dataclasses.replace keeps it; a new count below it ends the range
            if not 1 <= self.workers_min <= self.workers:
                object.__setattr__(self, "workers_min", None)
        _check(self.timeout_s > 0, "timeout_s", "must be > 0")
        _check(0 < self.heartbeat_s < self.timeout_s, "heartbeat_s", "must be > 0 and < timeout_s")
        _check(self.request_timeout_s > 0, "request_timeout_s", "must be > 0")
        _check(self.max_retries >= 0, "max_retries", "must be >= 0")
        _check(self.replicas >= 0, "replicas", f"must be >= 0, got {self.replicas}")
        _check(0 <= self.allreduce_port < 65536, "allreduce_port", "must be a port number or 0")

    @property
    def num_servers(self) -> int:
        return self.servers if isinstance(self.servers, int) else len(self.servers)

    @property
    def worker_range(self) -> Optional[WorkerRange]:
        """The elastic range (None: a fixed count of `workers`)."""
        return None if self.workers_min is None else WorkerRange(self.workers_min, self.workers)

    @property
    def starting_workers(self) -> int:
        """How many workers the run starts with: every rank, or the range's min."""
        return self.workers if self.workers_min is None else self.workers_min

    def yaml_values(self) -> dict:
        """Keys written differently from the fields: a range is written back as one."""
        return {} if self.workers_min is None else {"workers": self.worker_range}


MAX_STALENESS = 1_000_000  # an SSP bound above any run's clocks is asp in disguise; psgd ctl checks it too


@dataclass(frozen=True)
class ConsistencyConfig:
    mode: Mode = Mode.ASP          # bsp | ssp | asp | allreduce
    # SSP bound s: a pull at clock c waits for min clock >= c - s. "auto": the
    # shards adapt s within [staleness_min, staleness_max] from the workers'
    # step times (psgd/core/staleness_policy.py), starting at staleness_min.
    staleness: Union[int, Literal["auto"]] = 0
    staleness_min: int = 0       # auto: the smallest bound the shards may choose
    staleness_max: int = 8       # auto: the largest bound the shards may choose
    backup_workers: int = 0      # BSP: aggregate the first W - b gradients of a clock
    # BSP with local updates: merge a round once `size` deltas are in, after a grace window for
    # the rest; each delta weighted by its examples, latecomers in the next merge (psgd/config/quorum.py)
    quorum: Optional[QuorumConfig] = None

    def __post_init__(self):
        _check(self.staleness == "auto" or 0 <= self.staleness <= MAX_STALENESS, "staleness",
               f"must be in 0..{MAX_STALENESS} or auto, got {self.staleness}")
        _check(self.staleness != "auto" or self.mode is Mode.SSP, "staleness", "auto needs mode ssp")
        _check(self.staleness_min >= 0, "staleness_min", f"must be >= 0, got {self.staleness_min}")
        _check(self.staleness_max <= MAX_STALENESS, "staleness_max", f"must be <= {MAX_STALENESS}")
        _check(self.staleness_max >= self.staleness_min, "staleness_max",
               f"must be >= staleness_min ({self.staleness_min}), got {self.staleness_max}")
        _check(self.backup_workers >= 0, "backup_workers", f"must be >= 0, got {self.backup_workers}")
        _check(self.backup_workers == 0 or self.mode is Mode.BSP, "backup_workers", "only applies to mode bsp")
        _check(self.quorum is None or self.mode is Mode.BSP, "quorum", f"merges rounds: needs mode bsp, not {self.mode}")
        _check(self.quorum is None or not self.backup_workers, "quorum",
               "replaces backup_workers (which drops the late gradients a quorum merges next): set one")


@dataclass(frozen=True)
class TaskConfig:
    # Built-in name or "module.path:callable"; a module beside the config file is importable.
    model: str = "mlp"           # mlp | cnn | linear | cnn1d | char_transformer | module:callable -> nn.Module
    dataset: str = "digits"      # digits | synthetic | mnist1d | charlm | module:callable -> (train, test)
    batch_size: int = 32         # per worker
    model_args: dict[str, Any] = field(default_factory=dict)    # keyword arguments for the model
    dataset_args: dict[str, Any] = field(default_factory=dict)  # keyword arguments for the dataset
    # What y holds: integer class labels (classification) or float targets
    # (regression). auto: a built-in dataset's own; classification for a user's.
    objective: Literal["auto", "classification", "regression"] = "auto"

    def __post_init__(self):
        _check(bool(self.model), "model", "must not be empty")
        _check(bool(self.dataset), "dataset", "must not be empty")
        for kind in ("model", "dataset"):  # a misspelled built-in name fails here, before torch is imported
            refusal = spec_refusal(kind, getattr(self, kind))
            _check(refusal is None, kind, refusal)
        _check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class TargetConfig:
    # What `psgd bench convergence` and `psgd tune staleness` time: the first
    # evaluation meeting `value` after which the next `hold_evals` evaluations
    # stay within `tolerance` of it (psgd.core.target.TargetHold).
    metric: Literal["accuracy", "loss"] = "accuracy"   # test accuracy (higher is better) or test loss
    value: Optional[float] = None  # the target (required when the section is given)
    hold_evals: int = 3          # evaluations after the first one at the target that must hold it
    tolerance: float = 0.01      # holding: accuracy >= value - tolerance, or loss <= value + tolerance

    def __post_init__(self):
        _check(self.value is not None, "value", "give the target value of the metric")
        if self.metric == "accuracy":
            _check(0 < self.value <= 1, "value", f"an accuracy target must be in (0, 1], got {self.value}")
        else:
            _check(self.value > 0, "value", f"a loss target must be > 0, got {self.value}")
        _check(self.hold_evals >= 0, "hold_evals", f"must be >= 0, got {self.hold_evals}")
        _check(self.tolerance >= 0, "tolerance", f"must be >= 0, got {self.tolerance}")


@dataclass(frozen=True)
class TrainConfig:
    steps_per_worker: int = 500  # training steps each worker takes
    max_time_s: float = 120.0    # workers are stopped after this much training time
    target_accuracy: Optional[float] = 0.95  # for time_to_target_s (the bench uses `target` when set)
    target: Optional[TargetConfig] = None    # metric + value (+ hold rule) for the bench and the tuner
    stop_at_target: bool = False  # end the run once the evaluator sees the target

    def __post_init__(self):
        _check(self.steps_per_worker >= 1, "steps_per_worker", "must be >= 1")
        _check(self.max_time_s > 0, "max_time_s", "must be > 0")
        _check(self.target_accuracy is None or 0 < self.target_accuracy <= 1,
               "target_accuracy", "must be in (0, 1]")


@dataclass(frozen=True)
class EvalConfig:
    every_s: float = 1.0         # evaluator period
    enabled: bool = True         # run the evaluator (test accuracy and loss during the run)

    def __post_init__(self):
        _check(self.every_s > 0, "every_s", "must be > 0")


@dataclass(frozen=True)
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    wire: WireConfig = field(default_factory=WireConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    supervision: SupervisionConfig = field(default_factory=SupervisionConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    sim: SimConfig = field(default_factory=SimConfig)  # the virtual cluster's time model (psgd.sim)
    # Directory of the config file, so "module:callable" finds modules beside it.
    base_dir: str = field(default=".", metadata={"internal": True})

    def __post_init__(self):
        check_across_sections(self)


# Every way a user hands psgd a config.
ConfigLike = Union[Config, str, Path, Mapping[str, Any]]


def load_config(source: Optional[ConfigLike] = None, overrides: Sequence[str] = (), *,
                data: Optional[Mapping[str, Any]] = None) -> Config:
    """A validated Config from `source`, with `key.path=value` overrides applied.

    `source` is a YAML path, a mapping of sections, a Config, or None for the
    defaults; `data=` is the older spelling of a mapping. This is both
    `psgd.load_config` and `psgd.config.load_config`. Raises ConfigError naming
    the key path on any unknown key or bad value.
    """
    if data is not None:
        if source is not None:
            raise TypeError("pass the config as `source` or as `data`, not both")
        source = data
    base_dir = "."
    if isinstance(source, Config):
        if not overrides:
            return source
        source = {**config_to_dict(source), "base_dir": source.base_dir}
    if source is None:
        source = {}
    elif isinstance(source, (str, Path)):
        p = Path(source)
        if not p.is_file():
            raise ConfigError("", f"config file not found: {p}")
        try:
            source = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError("", f"{p} is not valid YAML: {exc}") from None
        base_dir = str(p.resolve().parent)
        if not isinstance(source, dict):
            raise ConfigError("", "the config must be a mapping of sections")
    elif not isinstance(source, Mapping):
        raise TypeError(f"a config is a psgd Config, a YAML path or a mapping, got {type(source).__name__}")
    tree = _deep_copy(dict(source))
    for item in overrides:
        key, value = parse_override(item)
        set_path(tree, key, value)
    # A resolved config (a run directory's config.yaml) records where the
    # original config lived, so user modules beside it are still found.
    recorded = tree.pop("base_dir", None)
    if isinstance(recorded, str) and recorded:
        base_dir = str(Path(base_dir, recorded).resolve())
    cfg = build(Config, tree, "")
    return dataclasses.replace(cfg, base_dir=base_dir)


def override_config(cfg: Config, overrides: Sequence[str]) -> Config:
    """`cfg` with `key.path=value` overrides applied and validated again (no file is read)."""
    return load_config(cfg, overrides)


def config_to_dict(cfg: Config) -> dict:
    """The config as plain YAML-able data, with the YAML key names."""
    def conv(obj):
        if dataclasses.is_dataclass(obj):
            values = {_yaml_key(f.name): conv(getattr(obj, f.name))
                      for f in dataclasses.fields(obj) if not f.metadata.get("internal")}
            if hasattr(obj, "yaml_values"):
                values.update({k: conv(v) for k, v in obj.yaml_values().items()})
            return values
        if isinstance(obj, Enum):
            return obj.value
        if isinstance(obj, dict):
            return {k: conv(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [conv(v) for v in obj]
        return obj
    return conv(cfg)


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML, with `base_dir` (where user modules are found)."""
    return yaml.safe_dump({**config_to_dict(cfg), "base_dir": cfg.base_dir}, sort_keys=False)


def _yaml_key(name: str) -> str:
    return name[:-1] if name.endswith("_") else name


def _deep_copy(obj):
    if isinstance(obj, dict):
        return {k: _deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v) for v in obj]
    return obj
