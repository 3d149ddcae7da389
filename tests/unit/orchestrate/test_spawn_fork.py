"""When `psgd launch` forks its children and when it execs them (psgd.orchestrate.spawn)."""
import sys

import pytest
import torch

from psgd.config import load_config
from psgd.orchestrate.spawn import fork_allowed


def _main(argv):
    return 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are forked on Linux only")
def test_children_are_forked_unless_the_launcher_has_used_cuda(monkeypatch):
    fork = load_config(None, ["run.start_method=fork"])
    assert fork_allowed(fork, _main)
    assert not fork_allowed(fork, None)  # no entry to run in the forked child
    assert not fork_allowed(load_config(None, ["run.start_method=exec"]), _main)
    # A CUDA context does not survive fork(): a launcher that touched the GPU execs its children.
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert not fork_allowed(fork, _main)
