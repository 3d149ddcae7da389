"""The guard in tests/unit/conftest.py holds: a unit test that starts a process fails."""
import multiprocessing
import subprocess
import sys

import pytest


def test_a_unit_test_cannot_start_a_process():
    with pytest.raises(AssertionError, match=r"a unit test started a process \(subprocess\): move it to tests/e2e"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(AssertionError, match="a unit test started a process"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with pytest.raises(AssertionError, match="a unit test started a process"):
        multiprocessing.get_context("fork").Process(target=print).start()
