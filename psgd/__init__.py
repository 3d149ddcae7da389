"""psgd: parameter-server SGD for PyTorch (BSP, SSP and ASP over ZeroMQ).

The public API. Names are imported on first use, so `import psgd` stays
light (no torch, no zmq) until one of them is touched:

    psgd.load_config(path_or_dict, overrides=[...])   -> Config
    psgd.Optimizer(model, cfg, optimizer=None, rank=None)
    psgd.serve(cfg, shard=i)                          # one blocking server shard
    psgd.launch(cfg, model=..., dataset=...)          -> Summary
    psgd.PSClient                                     # the low-level client

`psgd.__version__` is the version (written once, in psgd/runtime/version.py).
"""
from __future__ import annotations

import importlib
from typing import Any

from psgd.runtime.version import VERSION as __version__  # noqa: F401 (psgd.__version__)

__all__ = ["load_config", "Optimizer", "serve", "launch", "Summary", "PSClient", "Config", "ConfigError",
           "StartupError", "LaunchError", "UnsupportedOptimizer"]

# Public name -> (module, attribute). Imported on first use.
_LAZY = {
    "load_config": ("psgd.config", "load_config"),
    "Config": ("psgd.config", "Config"),
    "ConfigError": ("psgd.config", "ConfigError"),
    "Optimizer": ("psgd.workers.optimizer", "Optimizer"),
    "UnsupportedOptimizer": ("psgd.core.torch_optim", "UnsupportedOptimizer"),
    "serve": ("psgd.servers.serve", "serve"),
    "launch": ("psgd.orchestrate.api", "launch"),
    "Summary": ("psgd.orchestrate.api", "Summary"),
    "LaunchError": ("psgd.orchestrate.api", "LaunchError"),
    "StartupError": ("psgd.runtime.user_errors", "StartupError"),
    "PSClient": ("psgd.workers.client", "PSClient"),
}
assert set(_LAZY) == set(__all__), "every public name has one lazy import"


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'psgd' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
