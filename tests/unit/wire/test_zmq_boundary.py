"""Only the transport package (psgd/wire/transport/) imports zmq (docs/architecture.md), besides the bench's
raw-ZeroMQ baselines that measure it."""
import ast
from pathlib import Path

from support.source_tree import tree

ROOT = Path(__file__).resolve().parents[3]
TRANSPORT = "psgd/wire/transport/"
MAY_IMPORT_ZMQ = {"psgd/bench/raw_zmq.py", "psgd/bench/raw_shm.py"}  # besides the transport


def imports_zmq(path: Path) -> bool:
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "zmq" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "zmq":
            return True
    return False


def test_only_the_transport_imports_zmq():
    sources = [p for folder in ("psgd", "servers", "workers") for p in (ROOT / folder).rglob("*.py")]
    assert len(sources) > 50  # the package was found
    importers = {p.relative_to(ROOT).as_posix() for p in sources if imports_zmq(p)}
    assert "psgd/wire/transport/sockets.py" in importers
    outside = {p for p in importers if not p.startswith(TRANSPORT)}
    assert outside <= MAY_IMPORT_ZMQ, sorted(outside - MAY_IMPORT_ZMQ)
