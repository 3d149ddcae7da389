"""What psgd's wheel for the device is built from, and the bounds of the dependencies carried
with it: `checks.py source-hash` and `checks.py deps` print them for prepare.sh and run.sh."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("psgd", "servers", "workers")  # what psgd's wheel is built from, with setup.py and pyproject.toml

__all__ = ["source_hash", "dependency_specs"]


def source_hash() -> str:
    """sha256 over psgd's sources, as built into its wheel: run.sh refuses a stale wheel."""
    h = hashlib.sha256()
    files = [p for d in SOURCES for p in (ROOT / d).rglob("*.py")] + [ROOT / "setup.py", ROOT / "pyproject.toml"]
    for path in sorted(files, key=lambda p: p.relative_to(ROOT).as_posix()):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def dependency_specs(names: list[str]) -> list[str]:
    """pyproject.toml's requirement for each of `names` (its bounds: one place for them)."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index("dependencies = ["):]
    block = block[:block.index("]")]
    specs = {re.split(r"[<>=!~ ]", s, maxsplit=1)[0].lower(): s for s in re.findall(r'"([^"]+)"', block)}
    missing = [n for n in names if n.lower() not in specs]
    if missing:
        raise SystemExit(f"not dependencies of psgd (pyproject.toml): {', '.join(missing)}")
    return [specs[n.lower()] for n in names]
