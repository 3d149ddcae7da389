"""task.model and task.dataset are refused while the config loads when no model or dataset can
have that name, and before anything is imported when the user's module or object file is missing."""
import dataclasses
import sys

import pytest

from psgd.config import ConfigError, load_config
from psgd.config.task_sources import (
    BUILTIN_DATASET_NAMES,
    BUILTIN_MODEL_NAMES,
    OBJECT_PREFIX,
    check_task_sources,
    spec_refusal,
)
from psgd.tasks.datasets import BUILTIN_DATASETS
from psgd.tasks.registry import BUILTIN_MODELS


def test_the_names_the_config_accepts_are_the_ones_psgd_tasks_builds():
    assert BUILTIN_MODEL_NAMES == tuple(BUILTIN_MODELS)
    assert BUILTIN_DATASET_NAMES == tuple(BUILTIN_DATASETS)


@pytest.mark.parametrize("kind, names", [("model", BUILTIN_MODEL_NAMES), ("dataset", BUILTIN_DATASET_NAMES)])
def test_a_misspelled_name_fails_the_load_naming_the_key_and_every_known_name(kind, names):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"task.{kind}={names[0]}x"])
    assert caught.value.key == f"task.{kind}"
    assert str(caught.value) == (f"task.{kind}: unknown {kind} '{names[0]}x': the built-in {kind}s are "
                                 f"{', '.join(names)}; or give your own as 'module.path:callable'")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("spec", [*BUILTIN_MODEL_NAMES, "pkg.mod:make", f"{OBJECT_PREFIX}/x/model.pkl"])
def test_names_built_in_module_paths_and_objects_pass_the_spelling_check(spec):
    assert spec_refusal("model", spec) is None


@pytest.mark.parametrize("spec", ["mod:", ":make", "mod"])
def test_a_module_path_without_both_halves_is_refused(spec):
    assert spec_refusal("model", spec).startswith(f"unknown model {spec!r}")


def test_a_module_beside_the_config_is_found_without_being_imported(tmp_path):
    (tmp_path / "psgd_beside_cfg.py").write_text("raise RuntimeError('imported')\n")
    cfg = load_config({"task": {"model": "psgd_beside_cfg:Net", "dataset": "psgd_beside_cfg:data"}})
    check_task_sources(_with_base(cfg, tmp_path))  # would raise had it imported the module
    assert "psgd_beside_cfg" not in sys.modules


def test_a_missing_module_or_object_file_is_refused_naming_the_key(tmp_path):
    cfg = _with_base(load_config({"task": {"model": "psgd_no_such_mod.sub:Net"}}), tmp_path)
    with pytest.raises(ConfigError, match=r"^task\.model: cannot find module 'psgd_no_such_mod' for "
                                          r"'psgd_no_such_mod\.sub:Net' \(looked beside the config in "):
        check_task_sources(cfg)
    check_task_sources(cfg, given=["model"])  # supplied as an object: the config's spec is replaced
    missing = tmp_path / "dataset.pkl"
    cfg = _with_base(load_config({"task": {"dataset": f"{OBJECT_PREFIX}{missing}"}}), tmp_path)
    with pytest.raises(ConfigError, match=r"^task\.dataset: .*dataset\.pkl': no such file$"):
        check_task_sources(cfg)
    missing.write_bytes(b"")
    check_task_sources(cfg)


def _with_base(cfg, base):
    return dataclasses.replace(cfg, base_dir=str(base))
