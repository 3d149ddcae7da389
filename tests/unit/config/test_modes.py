"""Modes and roles are enums, compared as enums everywhere; the config holds the enum
and writes plain names."""
import ast
import json
from pathlib import Path

import msgpack
import pytest
import yaml
from support.source_tree import tree

from psgd.config import ConfigError, Mode, Role, dump_config, load_config

ROOT = Path(__file__).resolve().parents[3]
NAMES = {m.value for m in Mode} | {r.value for r in Role}
ENUM_MODULE = ROOT / "psgd" / "config" / "modes.py"


def _compared_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every mode or role name written as a string in a comparison."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            found += [(node.lineno, i.value) for i in items
                      if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in NAMES]
    return found


def test_no_mode_or_role_name_is_compared_as_a_string_outside_the_enums_module():
    offenders = []
    for folder in ("psgd", "servers", "workers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ENUM_MODULE:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{line}: {name!r}"
                          for line, name in _compared_names(tree(path))]
    assert offenders == [], "compare with psgd.config.Mode / Role instead:\n" + "\n".join(offenders)


def test_the_check_finds_a_string_comparison():
    tree = ast.parse('if cfg.consistency.mode == "ssp" or role in ("worker", "x"):\n    pass\n')
    assert _compared_names(tree) == [(1, "ssp"), (1, "worker")]


def test_the_config_holds_the_enum_and_writes_the_plain_name(tmp_path):
    cfg = load_config(None, ["consistency.mode=bsp"])
    assert cfg.consistency.mode is Mode.BSP
    assert yaml.safe_load(dump_config(cfg))["consistency"]["mode"] == "bsp"
    assert f"{cfg.consistency.mode}" == "bsp" and str(Mode.SSP) == "ssp"
    assert json.dumps(Mode.ASP) == '"asp"' and msgpack.unpackb(msgpack.packb(Role.WORKER)) == "worker"
    with pytest.raises(ConfigError, match="consistency.mode: must be one of bsp, ssp, asp, allreduce"):
        load_config(None, ["consistency.mode=sync"])


def test_what_each_mode_is():
    """Each mode's facts (on_servers, synchronous, live), named mode by mode: a new mode states
    its own without this test changing."""
    facts = {m: (m.on_servers, m.synchronous, m.live) for m in (Mode.BSP, Mode.SSP, Mode.ASP, Mode.ALLREDUCE)}
    assert facts == {Mode.BSP: (True, True, False), Mode.SSP: (True, False, True), Mode.ASP: (True, False, True),
                     Mode.ALLREDUCE: (False, True, False)}
    assert [r for r in Role if r.trains] == [Role.WORKER, Role.ALLREDUCE]
