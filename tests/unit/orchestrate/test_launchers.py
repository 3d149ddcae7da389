"""The launcher folder is the one list of launchers: `--on`, the check of
cluster.launcher and psgd.launch read it, a member is checked part by part, and a
new launcher is one new file."""
import importlib.util
import json
import sys
import types

import pytest

import psgd
from psgd.cli import build_parser
from psgd.config import ConfigError, load_config
from psgd.orchestrate import launchers
from psgd.orchestrate.launchers import (
    LauncherDefect,
    LauncherUnavailable,
    LaunchResult,
    launcher_for,
    launcher_from,
    launcher_names,
    load_launcher,
)

TOY = '''"""`--on toy`: a launcher written for a test, in one file."""
import json
from pathlib import Path

from psgd.orchestrate.launchers import LaunchResult

REQUIRES = {}


class ToyLauncher:
    resumable = False

    def __init__(self, cfg, run_dir, on_progress=None, resume=False, child_main=None, lock=None):
        self.cfg, self.run_dir = cfg, Path(run_dir)

    def run(self):
        summary = {"mode": str(self.cfg.consistency.mode), "launcher": self.cfg.cluster.launcher}
        (self.run_dir / "summary.json").write_text(json.dumps(summary))
        return LaunchResult(0, "", self.run_dir, summary)


def launcher_class():
    return ToyLauncher
'''


def member(**parts) -> types.ModuleType:
    module = types.ModuleType("psgd.orchestrate.launchers.planted")
    module.__dict__.update(parts)
    return module


class Complete:
    resumable = True

    def run(self) -> LaunchResult: ...


def test_each_launcher_is_a_module_of_the_folder_and_keeps_the_contract():
    from psgd.orchestrate.launchers.sim import SimLauncher
    from psgd.orchestrate.ray.launcher import RayLauncher
    from psgd.orchestrate.supervisor import Supervisor
    assert {"local", "ray", "sim"} <= set(launcher_names())  # and any launcher added since
    assert [load_launcher(n) for n in ("local", "ray", "sim")] == [Supervisor, RayLauncher, SimLauncher]
    assert launcher_for(load_config(None)) is Supervisor
    assert launcher_for(load_config(None, ["cluster.launcher=sim"])) is SimLauncher
    assert (Supervisor.resumable, RayLauncher.resumable, SimLauncher.resumable) == (True, True, False)


def test_the_cli_offers_and_the_config_check_accepts_exactly_the_folders_launchers(capsys):
    for name in launcher_names():
        assert build_parser().parse_args(["launch", "job.yaml", "--on", name]).on == name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["launch", "job.yaml", "--on", "slurm"])
    assert "invalid choice: 'slurm' (choose from " in capsys.readouterr().err
    with pytest.raises(ConfigError, match=f"cluster.launcher: must be one of {', '.join(launcher_names())}, got 'slurm'"):
        launcher_for(load_config(None, ["cluster.launcher=slurm"]))


@pytest.mark.parametrize("parts, missing", [
    ({"launcher_class": lambda: Complete}, "needs REQUIRES"),
    ({"REQUIRES": ["ray"], "launcher_class": lambda: Complete}, "needs REQUIRES"),
    ({"REQUIRES": {}}, "needs a launcher_class"),
    ({"REQUIRES": {}, "launcher_class": lambda: object}, "a class with run"),
    ({"REQUIRES": {}, "launcher_class": lambda: type("NoFlag", (), {"run": lambda self: None})}, "needs a `resumable`"),
])
def test_a_member_lacking_a_part_is_rejected_naming_it(parts, missing):
    with pytest.raises(LauncherDefect, match=missing):
        launcher_from("planted", member(**parts))
    assert launcher_from("planted", member(REQUIRES={}, launcher_class=lambda: Complete)) is Complete


def test_a_missing_package_is_one_line_with_how_to_install_it():
    absent = "psgd_test_no_such_package"
    assert importlib.util.find_spec(absent) is None
    with pytest.raises(LauncherUnavailable, match=f"--on planted .* needs {absent}: pip install it"):
        launcher_from("planted", member(REQUIRES={absent: "pip install it"}, launcher_class=lambda: Complete))


def test_a_new_launcher_is_one_file(tmp_path, monkeypatch, capsys, request):
    folder = tmp_path / "more_launchers"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY)
    monkeypatch.setattr(launchers, "__path__", [*launchers.__path__, str(folder)])
    request.addfinalizer(lambda: sys.modules.pop("psgd.orchestrate.launchers.toy", None))
    assert "toy" in launcher_names()
    sets = ["task.model=linear", "task.dataset=synthetic", "cluster.launcher=toy", "consistency.mode=bsp"]
    summary = psgd.launch(load_config(None, sets), out=str(tmp_path / "api"))  # the Python API
    assert (summary["launcher"], summary.mode, summary.run_dir) == ("toy", "bsp", tmp_path / "api")
    config = tmp_path / "job.yaml"
    config.write_text("task: {model: linear, dataset: synthetic}\n")
    from psgd.cli import main
    assert main(["launch", str(config), "--on", "toy", "--quiet", "--out", str(tmp_path / "cli")]) == 0  # the CLI
    assert json.loads((tmp_path / "cli" / "summary.json").read_text())["launcher"] == "toy"
    assert "done: asp" in capsys.readouterr().out
