"""Where `task.model` and `task.dataset` come from, checked without importing torch.

A spec is a built-in name, the user's own "module.path:callable", or
"object:PATH" (an object `psgd.launch` saved). The built-in names are listed
here, below the tasks layer, so a misspelled name is refused while the config
loads; psgd.tasks checks at import that its tables hold exactly these names.
`check_task_sources` adds what the file system can tell before anything is
imported: that the user's module can be found and an object's file exists.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterable, Optional

from psgd.config.loader import ConfigError

__all__ = ["BUILTIN_MODEL_NAMES", "BUILTIN_DATASET_NAMES", "OBJECT_PREFIX", "spec_refusal", "check_task_sources"]

BUILTIN_MODEL_NAMES = ("mlp", "cnn", "linear", "cnn1d", "char_transformer")
BUILTIN_DATASET_NAMES = ("digits", "synthetic", "mnist1d", "charlm")
OBJECT_PREFIX = "object:"  # a spec naming a file psgd.launch wrote (psgd/tasks/objects.py)

_BUILTINS = {"model": BUILTIN_MODEL_NAMES, "dataset": BUILTIN_DATASET_NAMES}


def spec_refusal(kind: str, spec: str) -> Optional[str]:
    """Why `spec` names no model (kind "model") or dataset ("dataset"), from its spelling alone; None if it may."""
    builtins = _BUILTINS[kind]
    if spec in builtins or spec.startswith(OBJECT_PREFIX):
        return None
    module, _, attr = spec.partition(":")
    if module and attr:
        return None
    return (f"unknown {kind} {spec!r}: the built-in {kind}s are {', '.join(builtins)}; "
            f"or give your own as 'module.path:callable'")


def _module_found(name: str, base_dir: str) -> bool:
    """Whether `name`'s top-level package can be imported the way psgd.tasks will import it
    (base_dir first, the working directory last), found without running any of its code."""
    top = name.split(".")[0]
    if top in sys.modules:
        return True
    try:
        if importlib.util.find_spec(top) is not None:  # installed, or on sys.path already
            return True
    except (ImportError, ValueError):
        return False
    return importlib.machinery.PathFinder.find_spec(top, [base_dir or ".", os.getcwd()]) is not None


def _source_refusal(kind: str, spec: str, base_dir: str) -> Optional[str]:
    refusal = spec_refusal(kind, spec)
    if refusal is not None or spec in _BUILTINS[kind]:
        return refusal
    if spec.startswith(OBJECT_PREFIX):
        path = spec[len(OBJECT_PREFIX):]
        return None if Path(path).is_file() else f"{spec!r}: no such file"
    module = spec.partition(":")[0]
    if _module_found(module, base_dir):
        return None
    return (f"cannot find module {module.split('.')[0]!r} for {spec!r} (looked beside the config in {base_dir}, "
            f"in the working directory and among installed packages)")


def check_task_sources(cfg, given: Iterable[str] = ()) -> None:
    """Raises ConfigError naming task.model or task.dataset when its source cannot
    be found; a key in `given` is supplied as an object instead and not checked.
    Imports nothing of the user's: a module found here may still fail to import
    (the task pre-flight says why)."""
    for kind in ("model", "dataset"):
        if kind in given:
            continue
        refusal = _source_refusal(kind, getattr(cfg.task, kind), cfg.base_dir)
        if refusal is not None:
            raise ConfigError(f"task.{kind}", refusal)
