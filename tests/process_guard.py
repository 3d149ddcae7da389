"""Tests without the e2e mark are process-free (so `pytest -m "not e2e"` starts no
launcher): one that starts a process fails, naming the call. Tests that need
real processes live in tests/e2e, where every test is e2e-marked."""
import _posixsubprocess
import os
import subprocess

import pytest


class ProcessStarted(AssertionError):
    pass


def pytest_sessionstart(session):
    # matplotlib builds its font cache on first use by running fc-list: on a fresh machine that
    # would be the first plotting unit test's process. Build it here, before processes are refused.
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


def _refuse(what):
    def refused(*args, **kwargs):
        raise ProcessStarted(f"a test without the e2e mark started a process ({what}): move it to tests/e2e")
    return refused


@pytest.fixture(autouse=True)
def no_processes(request, monkeypatch):
    if request.node.get_closest_marker("e2e") is not None:
        yield
        return
    monkeypatch.setattr(subprocess, "_fork_exec", _refuse("subprocess"))
    monkeypatch.setattr(subprocess, "_USE_POSIX_SPAWN", False)  # every Popen goes through _fork_exec
    monkeypatch.setattr(_posixsubprocess, "fork_exec", _refuse("multiprocessing spawn"))
    monkeypatch.setattr(os, "fork", _refuse("os.fork"))
    monkeypatch.setattr(os, "posix_spawn", _refuse("os.posix_spawn"))
    monkeypatch.setattr(os, "posix_spawnp", _refuse("os.posix_spawnp"))
    yield
