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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are forked on Linux only")
def test_a_run_whose_workers_train_on_cuda_execs_its_children(monkeypatch):
    # On an H200 a forked cuda worker failed with "CUDA error: initialization error": the
    # launcher had initialised the driver without torch.cuda.is_initialized() saying so.
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not fork_allowed(load_config(None, ["workers.device=cuda"]), _main)
    assert not fork_allowed(load_config(None, ["workers.device=auto"]), _main)  # auto picks the GPU
    assert fork_allowed(load_config(None, ["workers.device=cpu"]), _main)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert fork_allowed(load_config(None, ["workers.device=auto"]), _main)


def test_a_childs_cause_is_the_cuda_error_not_torchs_advice(tmp_path):
    from psgd.orchestrate.spawn import Child
    log = tmp_path / "worker-0.log"
    log.write_text("psgd worker: model 'mlp' failed: AcceleratorError: CUDA error: initialization error\n"
                   "Search for `cudaErrorInitializationError' in https://docs.nvidia.com/cuda/ for more.\n"
                   "CUDA kernel errors might be asynchronously reported at some other API call\n"
                   "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                   "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n\n")
    child = Child("worker", 0, proc=None, log=log, events=None)
    assert child.cause() == "psgd worker: model 'mlp' failed: AcceleratorError: CUDA error: initialization error"
