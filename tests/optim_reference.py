"""The server update rules paired with the torch.optim optimizers they must equal, for unit and e2e tests."""
import torch

RULES = {
    "sgd": (["optimizer.name=sgd", "optimizer.lr=0.1"], lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd_wd": (["optimizer.name=sgd", "optimizer.lr=0.1", "optimizer.weight_decay=0.01"],
               lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01)),
    "momentum": (["optimizer.name=momentum", "optimizer.lr=0.05", "optimizer.momentum=0.9"],
                 lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    "nesterov": (["optimizer.name=momentum", "optimizer.lr=0.05", "optimizer.momentum=0.8", "optimizer.nesterov=true"],
                 lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True)),
    "adam": (["optimizer.name=adam", "optimizer.lr=0.01", "optimizer.weight_decay=0.001"],
             lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.001)),
    "adamw": (["optimizer.name=adamw", "optimizer.lr=0.01", "optimizer.weight_decay=0.1"],
              lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
    "adagrad": (["optimizer.name=adagrad", "optimizer.lr=0.1", "optimizer.eps=1e-10"],
                lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10)),
}


def grads_sequence(n, numel, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=g) for _ in range(n)]
