"""A user's task module with the usual mistakes, for the pre-flight tests (unit and e2e)."""

USER_TASK = '''
import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


class Exploding(Net):
    def forward(self, x):
        raise RuntimeError("forward exploded")  # LINE_OF_FORWARD


def _xy(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long()


def good():
    x, y = _xy()
    return (x[:48], y[:48]), (x[48:], y[48:])


def numpy_data():
    x, y = _xy()
    return (x[:48].numpy(), y[:48].numpy()), (x[48:].numpy(), y[48:].numpy())


def short_labels():
    x, y = _xy()
    return (x[:48], y[:40]), (x[48:], y[48:])


def float_labels():
    x, y = _xy()
    return (x[:48], y[:48].float()), (x[48:], y[48:].float())
'''
FORWARD_LINE = next(i for i, line in enumerate(USER_TASK.splitlines(), start=1) if "LINE_OF_FORWARD" in line)
