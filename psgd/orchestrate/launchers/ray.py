"""`--on ray`: every role in a Ray actor on a Ray cluster (psgd.orchestrate.ray.launcher)."""
from __future__ import annotations

REQUIRES = {"ray": "pip install 'psgd[ray]'"}


def launcher_class() -> type:
    from psgd.orchestrate.ray.launcher import RayLauncher
    return RayLauncher
