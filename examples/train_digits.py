"""A plain PyTorch training script (its own model, DataLoader and torch.optim.Adam)
moved onto psgd's parameter servers by the three lines marked `# psgd`.

    psgd server examples/train_digits.yaml --shard 0 &
    psgd server examples/train_digits.yaml --shard 1 &
    torchrun --standalone --nproc-per-node 4 examples/train_digits.py examples/train_digits.yaml

Each torchrun process is one worker (its rank comes from torchrun); the
servers apply Adam with the hyperparameters given here, which must match the
config's `optimizer` section. The servers import this file for the model
(`task.model: train_digits:DigitsCNN`), so the training loop sits under
`if __name__ == "__main__"`.
"""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import psgd  # psgd


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.features(x.reshape(-1, 1, 8, 8)).flatten(1))


def digits():
    """(train, test) of the 8x8 digits shipped inside scikit-learn (no download)."""
    from sklearn.datasets import load_digits
    bunch = load_digits()
    x = torch.tensor(bunch.data, dtype=torch.float32) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    test, train = order[:len(y) // 5], order[len(y) // 5:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def main(config: str, epochs: int = 5) -> None:
    torch.manual_seed(0)
    model = DigitsCNN()
    train, test = digits()
    loader = DataLoader(train, batch_size=32, shuffle=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer = psgd.Optimizer(model, config, optimizer=optimizer)  # psgd
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    optimizer.close()  # psgd
    x, y = test.tensors
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    print(f"test accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:3]))
