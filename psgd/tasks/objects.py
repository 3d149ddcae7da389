"""Models and datasets handed to `psgd.launch` as Python objects rather than import paths.

The launching process writes each object with cloudpickle (which also carries
classes and functions defined in a script's `__main__` or a notebook) into
the run directory, and the task spec becomes `object:<path>`; every child
loads that file. These files hold code: they are read only from the run
directory the launching process itself wrote, never from the network.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from psgd.config.task_sources import OBJECT_PREFIX
from psgd.runtime.files import atomic_write

__all__ = ["OBJECT_PREFIX", "is_object_spec", "save_object", "load_object"]


def is_object_spec(spec: str) -> bool:
    return spec.startswith(OBJECT_PREFIX)


def save_object(obj: Any, path: Path) -> str:
    """Writes `obj` to `path`; returns the task spec that names it."""
    import cloudpickle

    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: cloudpickle.dump(obj, f), fsync=False)
    return OBJECT_PREFIX + str(path)


def load_object(spec: str) -> Any:
    import pickle

    path = Path(spec[len(OBJECT_PREFIX):])
    if not path.is_file():
        raise ValueError(f"{spec!r}: no such file (objects given to psgd.launch live in its run directory)")
    with open(path, "rb") as f:
        return pickle.load(f)  # noqa: S301 - written by this run's own launching process
