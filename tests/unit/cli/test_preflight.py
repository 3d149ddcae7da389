"""A bad config, and mistakes in the user's own model or data, fail `psgd launch` in the parent, naming the
problem, before any process starts: run in-process here, where the process guard
(tests/process_guard.py) fails the test if the launcher spawned anything."""
import sys

import pytest
from conftest import write_config
from support.user_code import FORWARD_LINE, USER_TASK

from psgd.cli import main


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "user_task.py").write_text(USER_TASK)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("user_task", "user_tsk"):  # each test writes its own copy under the same name
        sys.modules.pop(name, None)


@pytest.mark.parametrize("task, words", [
    ({"model": "user_tsk:Net"}, ["task.model: cannot find module 'user_tsk' for 'user_tsk:Net'"]),
    ({"model": "user_task:Nett"}, ["model 'user_task:Nett'", "user_task has no callable 'Nett'"]),
    ({"dataset": "user_task:numpy_data"}, ["train x must be a torch.Tensor, got numpy.ndarray"]),
    ({"dataset": "user_task:short_labels"}, ["train: x has 48 examples but y has 40"]),
    ({"dataset": "user_task:float_labels"}, ["train y has dtype torch.float32 but the task is classification"]),
    ({"model": "user_task:Exploding"}, ["one forward/backward", "RuntimeError: forward exploded",
                                        f"user_task.py:{FORWARD_LINE} in forward"]),
], ids=["module-typo", "callable-typo", "numpy", "lengths", "float-labels", "forward-raises"])
def test_user_code_mistakes_fail_in_the_parent_before_any_spawn(user_dir, capsys, task, words):
    config = write_config(user_dir / "config.yaml",
                          task={"model": "user_task:Net", "dataset": "user_task:good", "batch_size": 16, **task})
    out = user_dir / "run"
    assert main(["launch", str(config), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err, err
    assert "Traceback" not in err  # one message, not psgd's own stack
    assert not out.exists()  # nothing was started, so nothing could be restarted


@pytest.mark.parametrize("override, key", [("cluster.workers=-3", "cluster.workers"),
                                           ("cluster.wrokers=2", "cluster.wrokers")])
def test_a_bad_config_fails_before_any_spawn_naming_the_key(tmp_path, capsys, override, key):
    config = write_config(tmp_path / "config.yaml")
    assert main(["launch", str(config), "--out", str(tmp_path / "run"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
