"""GPU-worker code paths, checked on CPU: device choice, the distributed
backend, and ModelSync's exact, allocation-free parameter and gradient moves."""
import pytest
import torch

from psgd.runtime.devices import dist_backend
from psgd.workers.model_sync import select_device


def test_dist_backend_is_nccl_on_cuda_and_gloo_on_cpu():
    assert dist_backend("cuda", nccl_available=True) == "nccl"
    assert dist_backend(torch.device("cuda", 1), nccl_available=True) == "nccl"
    assert dist_backend("cuda", nccl_available=False) == "gloo"
    assert dist_backend("cpu") == "gloo"
    with pytest.raises(ValueError, match="'meta'"):
        dist_backend("meta")


def test_cuda_without_gpu_is_a_clear_error_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="workers.device is 'cuda'"):
        select_device("cuda")
    assert select_device("auto") == torch.device("cpu")
    assert select_device("cpu") == torch.device("cpu")


def test_cuda_is_chosen_by_auto_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert select_device("auto") == torch.device("cuda")
    assert select_device("cuda") == torch.device("cuda")


