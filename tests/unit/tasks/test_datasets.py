"""The built-in dataset table: one frozen spec per dataset, and what a spec
declares without building the data is what building the data gives."""
import dataclasses

import pytest

from psgd.config import load_config
from psgd.tasks import task_shape
from psgd.tasks.datasets import BUILTIN_DATASETS, DatasetSpec
from psgd.tasks.registry import build_splits


def test_every_builtin_is_one_frozen_spec():
    assert set(BUILTIN_DATASETS) == {"digits", "synthetic", "mnist1d", "charlm"}
    assert all(isinstance(spec, DatasetSpec) for spec in BUILTIN_DATASETS.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        BUILTIN_DATASETS["digits"].objective = "regression"


@pytest.mark.parametrize("dataset,args", [("digits", {}), ("synthetic", {}), ("synthetic", {"dim": 3})])
def test_a_declared_shape_is_the_shape_of_the_built_data(dataset, args):
    cfg = load_config(None, [f"task.dataset={dataset}", f"task.dataset_args={args}"])
    declared = task_shape(cfg)  # from the spec: no data built
    (xtr, ytr), _, built = build_splits(cfg)
    assert declared == built
    assert declared.regression == (BUILTIN_DATASETS[dataset].objective == "regression")
    assert xtr.shape[1] == declared.in_features


def test_a_server_never_builds_a_builtin_with_a_declared_shape(monkeypatch):
    spec = BUILTIN_DATASETS["synthetic"]

    def refuse(**_):
        raise AssertionError("the data was built")
    monkeypatch.setitem(BUILTIN_DATASETS, "synthetic", dataclasses.replace(spec, load=refuse))
    shape = task_shape(load_config(None, ["task.dataset=synthetic", "task.dataset_args={dim: 5}"]))
    assert (shape.in_features, shape.num_outputs, shape.regression) == (5, 1, True)
