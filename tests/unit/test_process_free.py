"""The guard in tests/process_guard.py holds: a test without the e2e mark that starts a process fails."""
import multiprocessing
import subprocess
import sys

import pytest


def test_a_test_without_the_e2e_mark_cannot_start_a_process():
    with pytest.raises(AssertionError, match=r"without the e2e mark started a process \(subprocess\): move it to tests/e2e"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(AssertionError, match="without the e2e mark started a process"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with pytest.raises(AssertionError, match="without the e2e mark started a process"):
        multiprocessing.get_context("fork").Process(target=print).start()
