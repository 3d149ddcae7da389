"""The wheel a user installs holds every module of the tree, at the name it is imported by.

Built from a copy of the sources (a stale build/ folder in the checkout could add
modules the tree no longer has), with pip and setuptools as a user's `pip install .` does.
"""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

import psgd

# Source folder -> the import name its modules install under (setup.py's package-dir mapping).
INSTALLED_AS = {"psgd": "psgd", "servers": "psgd/servers", "workers": "psgd/workers"}
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md")


def tree_modules() -> set[str]:
    found = set()
    for folder, installed in INSTALLED_AS.items():
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.add(f"{installed}/{path.relative_to(ROOT / folder).as_posix()}")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, src / name)
    for folder in INSTALLED_AS:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = out.glob("psgd-*.whl")
    return built


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_the_wheel_holds_every_module_of_the_tree_and_nothing_else(wheel):
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n for n in zf.namelist() if n.endswith(".py")}
    expected = tree_modules()
    assert {"psgd/sim/__init__.py", "psgd/servers/shard.py", "psgd/workers/worker.py"} <= expected
    assert expected - in_wheel == set(), "modules missing from the wheel"
    assert in_wheel - expected == set(), "modules in the wheel that the tree does not have"


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_the_wheel_carries_psgds_own_version_and_console_script(wheel):
    with zipfile.ZipFile(wheel) as zf:
        dist_info = next(n.split("/")[0] for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(f"{dist_info}/METADATA").decode()
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
    assert f"\nVersion: {psgd.__version__}\n" in metadata
    assert wheel.name.startswith(f"psgd-{psgd.__version__}-")
    assert "psgd = psgd.cli:main" in entry_points
