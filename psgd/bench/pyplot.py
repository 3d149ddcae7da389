"""matplotlib, imported only when a plot is drawn: it is the `bench` extra,
not a dependency of training, so `import psgd` and `psgd launch` work without it."""
from __future__ import annotations

from types import ModuleType

__all__ = ["MissingExtra", "BENCH_EXTRA", "require_matplotlib", "pyplot"]

BENCH_EXTRA = "pip install 'psgd[bench]'"


class MissingExtra(RuntimeError):
    """An optional dependency that a command needs is not installed; the message names the extra."""


def require_matplotlib() -> None:
    """Raise MissingExtra now, before a command spends minutes measuring, if it could not plot at the end."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtra(f"plots need matplotlib, which is not installed: {BENCH_EXTRA}") from None


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend (files only: no display is needed)."""
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
