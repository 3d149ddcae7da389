"""`import psgd` in a fresh interpreter stays light: the public names load on first use."""
import subprocess
import sys


def test_import_psgd_loads_neither_torch_nor_zmq():
    code = "import sys, psgd; print('torch' in sys.modules, 'zmq' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
