"""Errors raised by the user's own code (model, dataset), told with the user's frame.

A process that fails while building the user's model or data fails the same
way every time: it exits with STARTUP_EXIT_CODE, which the launcher never
restarts, and its message points at the user's file and line rather than at
psgd's or torch's internals.
"""
from __future__ import annotations

import os
import sysconfig
import traceback
from contextlib import contextmanager
from typing import Iterator, Optional

from psgd.runtime.role import EXIT_NO_RETRY

__all__ = ["STARTUP_EXIT_CODE", "StartupError", "user_frame", "describe", "user_code"]

# Exit status of a deterministic start-up failure (bad config, user code that
# raises while the model or data is built). Supervision does not restart it.
STARTUP_EXIT_CODE = EXIT_NO_RETRY

_PSGD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# psgd/ plus the servers/ and workers/ folders installed beside it as psgd.servers and psgd.workers.
_OWN_DIRS = {_PSGD_DIR, *(os.path.join(os.path.dirname(_PSGD_DIR), d) for d in ("servers", "workers"))}
_LIBRARY_DIRS = tuple(os.path.abspath(p) + os.sep for p in
                      {*_OWN_DIRS, *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))})


class StartupError(Exception):
    """User code failed while a process was being set up (deterministic: never retried)."""


def _is_library(filename: str) -> bool:
    path = os.path.abspath(filename)
    return filename.startswith("<") or path.startswith(_LIBRARY_DIRS) or os.sep + "site-packages" + os.sep in path


def user_frame(exc: BaseException) -> Optional[traceback.FrameSummary]:
    """The innermost traceback frame in the user's own files (not psgd, torch or the stdlib)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if not _is_library(frame.filename):
            return frame
    return None


def describe(exc: BaseException) -> str:
    """One line: 'ValueError: msg' and, when there is one, the user's file:line,
    function and source line (one line, so a launcher's one-line cause keeps it)."""
    text = f"{type(exc).__name__}: {exc}"
    frame = user_frame(exc)
    if frame is not None:
        text += f" (at {frame.filename}:{frame.lineno} in {frame.name}"
        text += f": {frame.line.strip()})" if frame.line else ")"
    return text


@contextmanager
def user_code(what: str) -> Iterator[None]:
    """Turns any exception raised inside into a StartupError saying `what` failed."""
    try:
        yield
    except StartupError:
        raise
    except Exception as exc:
        raise StartupError(f"{what} failed: {describe(exc)}") from exc
