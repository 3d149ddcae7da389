"""The check `psgd bench convergence` and `psgd tune staleness` make before
their first run: every mode's config resolves, its launcher can start here,
and the model and dataset build and take one forward/backward pass (the
launch pre-flight, psgd.orchestrate.preflight), once per distinct task.

A mistake then fails in seconds with one line, before any run starts,
instead of once in every run of the matrix.
"""
from __future__ import annotations

from typing import Sequence

from psgd.config import Config, load_config
from psgd.config.task_sources import check_task_sources
from psgd.orchestrate.launchers import LauncherUnavailable, launcher_for
from psgd.orchestrate.preflight import StartupError, preflight

__all__ = ["check_modes", "StartupError"]


def check_modes(config_path: str, overrides: Sequence[str], mode_overrides: Sequence[Sequence[str]]) -> list[Config]:
    """Every mode's resolved config, checked. Raises ConfigError (a key or
    value), ValueError (a launcher that cannot start here) or StartupError
    (the model or dataset), naming the problem in one line."""
    configs = [load_config(config_path, [*overrides, *sets]) for sets in mode_overrides]
    for cfg in configs:  # before a launcher or torch is imported
        check_task_sources(cfg)
    checked: set[tuple] = set()
    for cfg in configs:
        try:
            launcher_for(cfg)
        except LauncherUnavailable as exc:
            raise ValueError(str(exc)) from None
        # The task is what pre-flight builds; the layout over the shards only for parameter-server modes.
        key = (repr(cfg.task), cfg.consistency.mode.on_servers, cfg.cluster.num_servers)
        if key not in checked:
            checked.add(key)
            preflight(cfg)
    return configs
