"""Configuration: the schema (frozen dataclasses with commented defaults) and its YAML loader."""
from psgd.config.loader import ConfigError
from psgd.config.schema import (
    MODES, PS_MODES, CheckpointConfig, ClusterConfig, Config, ConsistencyConfig, DcAsgdConfig, EvalConfig, OptimizerConfig,
    RunConfig, ScheduleConfig, SecurityConfig, SupervisionConfig, TaskConfig, TrainConfig, WireConfig,
    WorkersConfig, LoaderConfig, config_to_dict, dump_config, load_config, override_config,
)

__all__ = [
    "MODES", "PS_MODES",
    "CheckpointConfig", "ClusterConfig", "Config", "ConfigError", "ConsistencyConfig", "DcAsgdConfig",
    "EvalConfig", "OptimizerConfig", "RunConfig", "ScheduleConfig", "SecurityConfig", "SupervisionConfig",
    "TaskConfig", "TrainConfig", "WireConfig", "WorkersConfig", "LoaderConfig", "config_to_dict", "dump_config",
    "load_config",
    "override_config",
]
