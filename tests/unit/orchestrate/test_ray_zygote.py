"""The Ray role zygote's client side (no process started: tests/e2e/test_ray_launch.py runs it)."""
import tempfile
from pathlib import Path

import pytest

from psgd.orchestrate.ray.zygote import fork_role, zygote_socket


def test_one_socket_per_run_on_a_node_named_without_the_runs_secret():
    token, other = "a" * 32, "b" * 32
    path = zygote_socket(token)
    assert path == zygote_socket(token) != zygote_socket(other)
    assert path.parent.parent == Path(tempfile.gettempdir()) and token not in str(path)


def test_a_command_that_is_not_a_module_run_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match=r"-m MODULE"):
        fork_role("c" * 32, ["psgd/cli.py", "worker"], tmp_path / "log", {}, tmp_path / "config.yaml")
    assert not zygote_socket("c" * 32).parent.exists()
