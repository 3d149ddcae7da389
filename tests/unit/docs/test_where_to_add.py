"""The architecture page's "where to add" table and worked example name real files, and no
module outside a registry's own declaration writes out the registry's members by hand: a
new mode, codec, update rule, local method or launcher touches only the files the table lists."""
import ast
import re
from pathlib import Path

from support.source_tree import parsed, text

from psgd.config import Mode
from psgd.core.local_methods.registry import LOCAL_METHODS
from psgd.core.rules.registry import RULES
from psgd.orchestrate.launchers import launcher_names
from psgd.wire.codecs import CODECS

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = ("psgd", "servers", "workers")

# Where the members' words are declared (the config is the bottom layer and cannot read the
# registries: docs/architecture.md, "Why a mode, codec or rule still needs its word"):
# (file, the name the literal is assigned to).
# A local method's fact the config's own check needs at load time (which methods may step with
# Delayed Nesterov) is declared beside its word, as a mode's facts are beside the Mode enum's.
DECLARED = {("psgd/config/operations.py", "CODEC_WORDS"), ("psgd/config/optimizer.py", "name"),
            ("psgd/config/local_updates.py", "LocalMethodWord"), ("psgd/config/local_updates.py", "_DELAYED")}
# The fault bench runs on real processes or the simulator only (its Where enum), not on any launcher.
NOT_AN_ENUMERATION = {("psgd/cli/faults.py", "choices")}


def registries() -> dict[str, set[str]]:
    codecs = set(CODECS)
    return {"codec": codecs, "mode": {m.value for m in Mode}, "update rule": set(RULES),
            "launcher": set(launcher_names()), "local method": set(LOCAL_METHODS)}


_LITERALS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Subscript)


def _words(node: ast.AST) -> set[str]:
    """The strings (and Mode members, lower-cased) a list, tuple, set, dict or Literal[...] spells out."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        elts = node.elts
    elif isinstance(node, ast.Dict):
        elts = [k for k in node.keys if k is not None]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    else:
        return set()
    return ({e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            | {e.attr.lower() for e in elts if isinstance(e, ast.Attribute) and getattr(e.value, "id", "") == "Mode"})


def _owners(tree: ast.AST) -> dict[int, str]:
    """id(literal) -> the name it is assigned (or passed as a keyword) to."""
    owner = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            for sub in ast.walk(node.value) if node.value is not None and names else ():
                owner.setdefault(id(sub), names[0])
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                for sub in ast.walk(node.annotation):
                    owner.setdefault(id(sub), node.target.id)
        elif isinstance(node, ast.keyword) and node.arg:
            for sub in ast.walk(node.value):
                owner.setdefault(id(sub), node.arg)
    return owner


def hand_lists(source: str, rel: str, members: dict[str, set[str]]) -> list[str]:
    """Literals in `source` (the file `rel`) that spell out more than half of a registry's members (two at least)."""
    spelled = set(re.findall(r"""["']([\w.]+)["']|Mode\.([A-Z]+)""", source))
    spelled = {quoted or attr.lower() for quoted, attr in spelled}
    if not any(len(spelled & names) >= 2 for names in members.values()):
        return []  # no literal here can name two members
    tree = parsed(source)
    literals = [(node, words) for node in ast.walk(tree) if isinstance(node, _LITERALS) and (words := _words(node))]
    hits = [(node, kind, sorted(words & names)) for node, words in literals for kind, names in members.items()]
    hits = [(node, kind, hit) for node, kind, hit in hits if len(hit) >= 2 and 2 * len(hit) > len(members[kind])]
    owner = _owners(tree) if hits else {}
    return [f"{rel}:{node.lineno}: {kind}s {hit} written out by hand" for node, kind, hit in hits
            if (rel, owner.get(id(node))) not in DECLARED | NOT_AN_ENUMERATION]


def test_no_module_writes_out_a_registry_by_hand():
    members = registries()
    found = [hit for folder in LIBRARY for path in sorted((ROOT / folder).rglob("*.py"))
             for hit in hand_lists(text(path), path.relative_to(ROOT).as_posix(), members)]
    assert found == []


def test_the_check_finds_a_hand_list():
    """The grep above is not blind: the lists bench/convergence.py and config/modes.py once kept are
    found; two modes named for what they do (doctor's BSP against all-reduce) are not a list of them."""
    sample = ('SUFFIXES = ("fp16", "bf16", "int8", "int4", "int2_ef", "topk")\n'
              'PS_MODES = (Mode.BSP, Mode.SSP, Mode.ASP)\nTWO = (Mode.BSP, Mode.ALLREDUCE)\n')
    assert hand_lists(sample, "psgd/bench/sample.py", registries()) == [
        "psgd/bench/sample.py:1: codecs ['bf16', 'fp16', 'int2_ef', 'int4', 'int8', 'topk'] written out by hand",
        "psgd/bench/sample.py:2: modes ['asp', 'bsp', 'ssp'] written out by hand"]


def _named_paths(text: str) -> set[str]:
    """Backticked repository paths (a folder or a .py file) in `text`."""
    return {m for m in re.findall(r"`([\w./]+)`", text) if "/" in m and (m.endswith("/") or m.endswith(".py"))}


def test_every_file_the_table_and_the_worked_example_name_exists():
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page[page.index("## Where a change goes"):]
    paths = _named_paths(section)
    assert {"psgd/core/modes/", "psgd/wire/codecs/", "psgd/config/operations.py",
            "psgd/orchestrate/launchers/"} <= paths  # the table's rows are read
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []
