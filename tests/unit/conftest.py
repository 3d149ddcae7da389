"""Unit tests are process-free: a unit test that starts a process fails, naming the
call (tests that need real processes live in tests/e2e)."""
import _posixsubprocess
import os
import subprocess

import pytest


class ProcessStarted(AssertionError):
    pass


def _refuse(what):
    def refused(*args, **kwargs):
        raise ProcessStarted(f"a unit test started a process ({what}): move it to tests/e2e")
    return refused


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    monkeypatch.setattr(subprocess, "_fork_exec", _refuse("subprocess"))
    monkeypatch.setattr(subprocess, "_USE_POSIX_SPAWN", False)  # every Popen goes through _fork_exec
    monkeypatch.setattr(_posixsubprocess, "fork_exec", _refuse("multiprocessing spawn"))
    monkeypatch.setattr(os, "fork", _refuse("os.fork"))
    monkeypatch.setattr(os, "posix_spawn", _refuse("os.posix_spawn"))
    monkeypatch.setattr(os, "posix_spawnp", _refuse("os.posix_spawnp"))
    yield
