"""A tiny classifier and its data for the worker-side unit tests: the same model and
batches wherever two tests compare runs (seeded, so every call gives the same)."""
import torch
from torch import nn


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 5, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(n)]
