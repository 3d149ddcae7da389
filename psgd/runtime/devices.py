"""Which torch.distributed backend fits a device (nccl for CUDA tensors, gloo
otherwise), and how to wait for a device's queued work before reading a clock.

The all-reduce baseline calls `dist_backend(device)` when it initialises its
process group, so the same config runs on CPU hosts and GPU hosts.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.distributed as dist

__all__ = ["dist_backend", "wait_for_device"]


def dist_backend(device: Union[str, torch.device], nccl_available: Optional[bool] = None) -> str:
    """'nccl' for a CUDA device when torch was built with NCCL, else 'gloo'.
    `nccl_available` overrides the build check (for tests)."""
    kind = torch.device(device).type
    if kind == "cuda":
        has_nccl = dist.is_nccl_available() if nccl_available is None else nccl_available
        return "nccl" if has_nccl else "gloo"  # gloo also reduces CUDA tensors, only slower
    if kind != "cpu":
        raise ValueError(f"no torch.distributed backend chosen for device type {kind!r} (cpu or cuda)")
    return "gloo"


def wait_for_device(device: torch.device) -> None:
    """Block until every kernel queued on `device` has run. CUDA work is asynchronous:
    a time read right after backward() would count only the kernels' launches, and the
    device time would fall into whatever synchronises next (a worker's push)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
