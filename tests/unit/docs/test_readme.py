"""The README stays a short page whose links resolve and whose test command is the one CI runs."""
import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_is_short():
    assert len(README.splitlines()) <= 250


def test_every_relative_link_in_the_readme_resolves():
    targets = [t.split("#", 1)[0] for t in LINK.findall(README) if "://" not in t]
    assert len(targets) > 10
    assert [t for t in targets if t and not (ROOT / t).exists()] == []


def test_the_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    setup_and_test = next(line for line in ci if line.startswith("python3 -m venv .venv"))
    assert setup_and_test in README
    assert ".venv/bin/psgd launch configs/quickstart.yaml" in README
    assert "torch==2.13.0" in setup_and_test
