"""Every error code raised or replied is an ErrorCode member, not a bare string (issue 23)."""
import ast
from pathlib import Path

from support.source_tree import tree

from psgd.wire.protocol import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
RAISERS = {"ProtocolError", "ControlError", "ShmError", "Error"}
# Files owned by other engineers during the contracts work; the lead empties this at merge.
KNOWN_LITERAL_FILES: set[str] = set()  # every file uses the ErrorCode members


def literal_codes(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        args = list(node.args[:1]) if name in RAISERS else []
        args += [kw.value for kw in node.keywords if kw.arg == "code"]
        found += [(a.lineno, a.value) for a in args
                  if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        found += [(a.lineno, ast.unparse(a)) for a in args if isinstance(a, ast.JoinedStr)]  # f"bad_{x}"
    return found


def offenders() -> dict[str, list[tuple[int, str]]]:
    result = {}
    for folder in ("psgd", "servers", "workers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            hits = literal_codes(tree(path))
            if hits:
                result[rel] = hits
    return result


def test_no_bare_error_code_outside_known_files():
    unexpected = {f: h for f, h in offenders().items() if f not in KNOWN_LITERAL_FILES}
    assert unexpected == {}


def test_walk_catches_a_new_literal_code():
    tree = ast.parse('raise ProtocolError("new_code", "x")\nP.Error(code="other", reason="y")\n'
                     'raise ProtocolError(f"bad_{name}", "z")')
    assert [c for _, c in literal_codes(tree)] == ["new_code", "other", "f'bad_{name}'"]


def test_codes_are_unique_and_wire_equal():
    values = [c.value for c in ErrorCode]
    assert len(values) == len(set(values))
    assert all(c == c.value and c.name == c.value.upper() for c in ErrorCode)
