"""The launchers a job runs on: `psgd launch --on NAME`, `cluster.launcher: NAME`, `psgd.launch`.

Every module in this folder is one launcher, named by its file (local.py is
`local`), and holds two parts:

    REQUIRES = {"ray": "pip install 'psgd[ray]'"}   # optional packages it imports, and how to get them
    def launcher_class() -> type: ...               # the class, imported only when chosen

The class keeps one contract (JobLauncher): built with the resolved config and
the run directory, `run()` runs the whole job and returns a LaunchResult; it
never raises for the job's own failure. A class may also define a static
`check(cfg)` that raises ConfigError for values it refuses, called before the
run directory is used (the simulator's unbounded time models). This folder is the only list of
launchers: the CLI's `--on` choices, the check of `cluster.launcher` and
`psgd.launch` all read it, so a new launcher is one new file here (plus its
tests). Names are found without importing anything, and a member is imported
and checked part by part when it is chosen.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, ClassVar, Optional, Protocol

from psgd.config import Config, ConfigError

__all__ = ["JobLauncher", "LaunchFailed", "LaunchResult", "LauncherDefect", "LauncherUnavailable", "launcher_for",
           "launcher_from", "launcher_names", "load_launcher"]


@dataclass
class LaunchResult:
    """How a job ended: exit code (0 done, 128+N stopped by signal N), a one-line
    reason, and the figures of its summary.json."""
    code: int
    reason: str
    run_dir: Path
    summary: Optional[dict] = None
    refused: bool = False  # the run directory was not ours to use: nothing in it was touched


class LaunchFailed(RuntimeError):
    """A launch that cannot go on, with its one-line reason (the launchers turn it into a LaunchResult)."""


class JobLauncher(Protocol):
    """What every launcher class is. `lock`: the run directory's lock, held by the
    caller (psgd.runtime.run_lock); `child_main`: the `psgd` entry forked children run."""
    resumable: ClassVar[bool]  # whether `psgd launch --resume` can continue its runs

    def __init__(self, cfg: Config, run_dir: Path, on_progress: Optional[Callable] = None, resume: bool = False,
                 child_main: Optional[Callable[[list[str]], int]] = None, lock=None) -> None: ...

    def run(self) -> LaunchResult: ...


class LauncherUnavailable(RuntimeError):
    """The chosen launcher needs a package this environment lacks; nothing was started."""


class LauncherDefect(TypeError):
    """A module in this folder lacks a part of the launcher contract (a bug in psgd, not in the config)."""


def launcher_names() -> tuple[str, ...]:
    """Every launcher, by name (the modules of this folder)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def launcher_from(name: str, module: ModuleType) -> type:
    """The launcher class module `module` holds, its parts checked: LauncherDefect when
    one is missing, LauncherUnavailable when a package it REQUIRES is not installed."""
    requires = getattr(module, "REQUIRES", None)
    if not isinstance(requires, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in requires.items()):
        raise LauncherDefect(f"launcher {name!r} ({module.__name__}) needs REQUIRES: a dict of package -> install hint")
    if not callable(getattr(module, "launcher_class", None)):
        raise LauncherDefect(f"launcher {name!r} ({module.__name__}) needs a launcher_class() function")
    for package, install in requires.items():
        if importlib.util.find_spec(package) is None:
            raise LauncherUnavailable(f"--on {name} (cluster.launcher: {name}) needs {package}: {install}")
    cls = module.launcher_class()
    if not isinstance(cls, type) or not callable(getattr(cls, "run", None)):
        raise LauncherDefect(f"launcher {name!r}: launcher_class() must return a class with run() -> LaunchResult")
    if not isinstance(getattr(cls, "resumable", None), bool):
        raise LauncherDefect(f"launcher {name!r}: {cls.__name__} needs a `resumable` bool")
    return cls


def load_launcher(name: str) -> type:
    """The class of launcher `name`. Raises ConfigError for an unknown name, and as launcher_from."""
    names = launcher_names()
    if name not in names:
        raise ConfigError("cluster.launcher", f"must be one of {', '.join(names)}, got {name!r}")
    return launcher_from(name, importlib.import_module(f"{__name__}.{name}"))


def launcher_for(cfg: Config) -> type:
    """The launcher class that runs `cfg`'s job here (see load_launcher for what it raises)."""
    if cfg.logging.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise LauncherUnavailable("logging.tensorboard needs the tensorboard package: pip install 'psgd[tensorboard]'")
    return load_launcher(cfg.cluster.launcher)
