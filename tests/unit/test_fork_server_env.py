"""The test suite's fork server (tests/support/fork_server.py) forks a psgd command only
when the command's environment is the one the server imported torch and psgd under."""
import sys
import types

import pytest
from support.fork_server import environment_matches

SERVER = {"PATH": "/usr/bin", "PYTHONUNBUFFERED": "1"}
CACHE_UTILS = "torch._inductor.runtime.cache_dir_utils"


@pytest.fixture
def torch_default(monkeypatch):
    """torch's cache-directory module as after torch._dynamo's first import, its default made up."""
    module = types.SimpleNamespace(default_cache_dir=lambda: "/tmp/torchinductor_someone")
    monkeypatch.setitem(sys.modules, CACHE_UTILS, module)
    return module.default_cache_dir()


def test_the_cache_directory_torch_wrote_itself_does_not_stop_a_fork(torch_default):
    assert environment_matches({**SERVER, "TORCHINDUCTOR_CACHE_DIR": torch_default}, SERVER)


def test_a_cache_directory_of_the_callers_own_does(torch_default):
    assert not environment_matches({**SERVER, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}, SERVER)


def test_before_torch_wrote_one_any_cache_directory_is_the_callers(monkeypatch):
    monkeypatch.delitem(sys.modules, CACHE_UTILS, raising=False)
    assert not environment_matches({**SERVER, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_someone"}, SERVER)


def test_pytests_own_variable_is_ignored_and_any_other_difference_execs():
    assert environment_matches({**SERVER, "PYTEST_CURRENT_TEST": "t.py::t (call)"}, SERVER)
    assert not environment_matches({**SERVER, "OMP_NUM_THREADS": "4"}, SERVER)
