"""`psgd ctl` talks to a live run's shards and reads its config: it loads no torch, so a
command an operator types answers in a fraction of a second rather than after torch's import."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

# What `psgd ctl RUN show|set` imports before it talks to the shards.
CTL_IMPORTS = "import psgd.cli.ctl, psgd.orchestrate.control, psgd.orchestrate.elastic"


def test_psgd_ctl_imports_no_torch():
    probe = f"import sys; {CTL_IMPORTS}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
