"""A shared-memory segment cannot outlive the process that made it: it is a memfd,
never a file under /dev/shm."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from psgd.wire.shm import segment as shm

pytestmark = pytest.mark.skipif(not shm.available(), reason="no sealable memfd here")


def test_a_sigkilled_creator_leaves_nothing_behind(tmp_path):
    code = ("import os, sys, time; from psgd.wire.shm.segment import Segment; "
            "s = Segment.create(1 << 20, 1 << 20); print(s.name, flush=True); time.sleep(60)")
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    name = proc.stdout.readline().strip()
    pid, fd = shm.parse_name(name)
    assert os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:psgd-segment")  # no file system path
    proc.kill()
    proc.wait()
    proc.stdout.close()
    assert not os.path.exists(f"/proc/{pid}/fd/{fd}")
    if before:
        assert set(os.listdir("/dev/shm")) <= before  # nothing was ever made there
