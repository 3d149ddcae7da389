"""The dataset contract: what a user's dataset may return, and the message for each mistake."""
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset

from psgd.tasks.contract import DatasetContractError, check_targets, resolve_objective, split_tensors

X = torch.randn(6, 3)
Y = torch.arange(6) % 2


class Pairs(Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def test_tuple_tensordataset_and_map_style_give_the_same_tensors():
    for ds in ((X, Y), TensorDataset(X, Y), Pairs([(X[i], int(Y[i])) for i in range(6)])):
        x, y = split_tensors("train", ds)
        assert torch.equal(x, X) and torch.equal(y, Y)


@pytest.mark.parametrize("ds, words", [
    ((X.numpy(), Y), "train x must be a torch.Tensor, got numpy.ndarray (convert it with torch.from_numpy)"),
    ((X, Y.numpy()), "train y must be a torch.Tensor, got numpy.ndarray"),
    ((X, Y[:5]), "train: x has 6 examples but y has 5"),
    (Pairs([(X[0].numpy(), 1)]), "train[0] x must be a torch.Tensor, got numpy.ndarray"),
    (Pairs([(X[0], "cat")]), "train[0] y must be a tensor or a Python number, got str"),
    (Pairs([X[0]]), "train[0] must be an (x, y) pair"),
    (Pairs([(X[0], 0), (X[0, :2], 1)]), "items have different shapes"),
    ((X[:0], Y[:0]), "train is empty"),
    (TensorDataset(X, Y, Y), "has 2 tensors, this one 3"),
    (42, "must be (x, y) tensors or a torch Dataset"),
])
def test_contract_violations_are_named(ds, words):
    with pytest.raises(DatasetContractError) as info:
        split_tensors("train", ds)
    assert words in str(info.value)


def test_iterable_datasets_are_refused_with_the_reason():
    class Stream(IterableDataset):
        def __iter__(self):
            yield X[0], 0
    with pytest.raises(DatasetContractError, match="IterableDataset has no length"):
        split_tensors("test", Stream())


def test_float_labels_on_classification_and_int_targets_on_regression_are_refused():
    with pytest.raises(DatasetContractError, match="test y has dtype torch.float32 but the task is classification"):
        check_targets("test", Y.float(), "classification")
    with pytest.raises(DatasetContractError, match="train y has dtype torch.int64 but the task is regression"):
        check_targets("train", Y, "regression")
    with pytest.raises(DatasetContractError, match="negative class label -1"):
        check_targets("train", Y - 1, "classification")
    check_targets("train", Y, "classification")
    check_targets("train", Y.float(), "regression")


def test_auto_objective_is_the_builtins_own_and_classification_for_user_data():
    assert resolve_objective("auto", "regression") == "regression"
    assert resolve_objective("auto", None) == "classification"
    assert resolve_objective("regression", None) == "regression"
