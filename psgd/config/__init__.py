"""Configuration: the schema (frozen dataclasses with commented defaults) and its YAML loader."""
from psgd.config.loader import ConfigError
from psgd.config.modes import Mode, Role
from psgd.config.schema import (
    MODES,
    PS_MODES,
    CheckpointConfig,
    ClusterConfig,
    Config,
    ConfigLike,
    ConsistencyConfig,
    DcAsgdConfig,
    DelayConfig,
    EvalConfig,
    LoaderConfig,
    LoggingConfig,
    OptimizerConfig,
    RayConfig,
    RayRoleConfig,
    RunConfig,
    ScheduleConfig,
    SecurityConfig,
    SupervisionConfig,
    TargetConfig,
    TaskConfig,
    TrainConfig,
    TransientConfig,
    WireConfig,
    WorkersConfig,
    config_to_dict,
    dump_config,
    load_config,
    override_config,
)

__all__ = [
    "MODES", "PS_MODES", "Mode", "Role",
    "CheckpointConfig", "ClusterConfig", "Config", "ConfigLike", "ConfigError", "ConsistencyConfig", "DcAsgdConfig",
    "DelayConfig", "TargetConfig", "TransientConfig", "LoaderConfig", "LoggingConfig", "RayConfig", "RayRoleConfig",
    "EvalConfig", "OptimizerConfig", "RunConfig", "ScheduleConfig", "SecurityConfig", "SupervisionConfig",
    "TaskConfig", "TrainConfig", "WireConfig", "WorkersConfig", "config_to_dict", "dump_config", "load_config",
    "override_config",
]
