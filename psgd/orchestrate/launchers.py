"""Which launcher runs a job: the local one, Ray's, or the virtual cluster's."""
from __future__ import annotations

import importlib.util
from typing import Optional

from psgd.config import Config

__all__ = ["launcher_for"]


def launcher_for(cfg: Config) -> tuple[Optional[type], str]:
    """(launcher class, "") or (None, why the job cannot start here)."""
    if cfg.logging.tensorboard and importlib.util.find_spec("tensorboard") is None:
        return None, "logging.tensorboard needs the tensorboard package: pip install 'psgd[tensorboard]'"
    if cfg.cluster.launcher == "ray":
        if importlib.util.find_spec("ray") is None:
            return None, "--on ray (cluster.launcher: ray) needs Ray: pip install 'psgd[ray]'"
        from psgd.orchestrate.ray.launcher import RayLauncher
        return RayLauncher, ""
    if cfg.cluster.launcher == "sim":
        from psgd.sim.launcher import SimLauncher, refusal
        problem = refusal(cfg)  # values the virtual cluster cannot finish in bounded time, before any file
        return (None, problem) if problem else (SimLauncher, "")
    from psgd.orchestrate.launcher import Launcher
    return Launcher, ""
