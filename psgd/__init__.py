"""psgd: parameter-server SGD for PyTorch (BSP, SSP and ASP over ZeroMQ).

The public API. Names are imported on first use, so `import psgd` stays
light (no torch, no zmq) until one of them is touched:

    psgd.load_config(path_or_dict, overrides=[...])   -> Config
    psgd.Optimizer(model, cfg, optimizer=None, rank=None)
    psgd.serve(cfg, shard=i)                          # one blocking server shard
    psgd.launch(cfg, model=..., dataset=...)          -> Summary
    psgd.PSClient                                     # the low-level client
"""
from __future__ import annotations

from typing import Any

__all__ = ["load_config", "Optimizer", "serve", "launch", "Summary", "PSClient", "Config", "ConfigError",
           "StartupError", "LaunchError", "UnsupportedOptimizer"]

def __getattr__(name: str) -> Any:
    value = _load(name)
    globals()[name] = value  # later look-ups skip this function
    return value


def _load(name: str) -> Any:  # noqa: C901 - one plain import per public name
    if name == "load_config":
        from psgd.config.coerce import as_config
        return as_config
    if name in ("Config", "ConfigError"):
        import psgd.config
        return getattr(psgd.config, name)
    if name == "Optimizer":
        from psgd.workers.optimizer import Optimizer
        return Optimizer
    if name == "UnsupportedOptimizer":
        from psgd.core.torch_optim import UnsupportedOptimizer
        return UnsupportedOptimizer
    if name == "serve":
        from psgd.servers.serve import serve
        return serve
    if name == "launch":
        import psgd.launch  # the package is callable: see psgd/launch/__init__.py
        return psgd.launch
    if name in ("Summary", "LaunchError"):
        import psgd.launch.api
        return getattr(psgd.launch.api, name)
    if name == "StartupError":
        from psgd.runtime.user_errors import StartupError
        return StartupError
    if name == "PSClient":
        from psgd.workers.client import PSClient
        return PSClient
    raise AttributeError(f"module 'psgd' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
