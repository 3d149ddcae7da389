"""Every event name lives in psgd.runtime.event_names: no writer or reader spells one as a
bare string, and every emit carries the fields its kind promises (FIELDS)."""
import ast
from pathlib import Path

from support.source_tree import tree

from psgd.runtime.event_names import FIELDS, Event

ROOT = Path(__file__).resolve().parents[3]
DEFINITIONS = ROOT / "psgd" / "runtime" / "event_names.py"
NAMES = {e.value for e in Event}


def _sources():
    for folder in ("psgd", "servers", "workers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != DEFINITIONS:
                yield path, tree(path)


def _mentions_event_key(node) -> bool:
    """`e.get("event")`, `e["event"]` or a variable named `ev`/`event`."""
    if isinstance(node, ast.Name):
        return node.id in ("ev", "event")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return any(isinstance(a, ast.Constant) and a.value == "event" for a in node.args[:1])
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "event"
    return False


def _event_of(node):
    """Event.X in the source -> Event.X; anything else -> None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Event":
        return Event[node.attr]
    return None


def _offences(tree) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_mentions_event_key(s) for s in sides):
                found += [(node.lineno, f"compared with {s.value!r}") for s in sides
                          if isinstance(s, ast.Constant) and s.value in NAMES]
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "event" and isinstance(v, ast.Constant):
                    found.append((node.lineno, f'"event": {v.value!r}'))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name == "emit" and node.args:
                first, keywords = node.args[0], node.keywords
            elif name == "event" and len(node.args) >= 4:  # the simulator's record builder
                first, keywords = node.args[3], node.keywords
            else:
                continue
            if isinstance(first, ast.Constant):
                found.append((node.lineno, f"{name}({first.value!r}, ...)"))
                continue
            kind = _event_of(first)
            if kind is None or any(k.arg is None for k in keywords):  # a variable, or **fields: checked where built
                continue
            missing = FIELDS[kind] - {k.arg for k in keywords}
            if missing:
                found.append((node.lineno, f"{kind.value} without {sorted(missing)}"))
    return found


def test_no_event_name_is_a_bare_string_and_every_emit_has_its_fields():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {what}" for path, tree in _sources()
                 for line, what in _offences(tree)]
    assert offenders == [], "use psgd.runtime.event_names.Event and its FIELDS:\n" + "\n".join(offenders)


def test_the_check_catches_what_it_forbids():
    bad = ast.parse('log.emit("step", rank=1)\nif e.get("event") == "eval": pass\n'
                    'r = {"event": "done"}\nlog.emit(Event.STEP, rank=1)\n')
    assert [what for _, what in _offences(bad)] == [
        "emit('step', ...)", "compared with 'eval'", "\"event\": 'done'",
        "step without ['clock', 'comm_s', 'compute_s', 'gap', 'loss', 'step_s']"]


def test_events_are_written_as_their_plain_names(tmp_path):
    from psgd.runtime.events import EventLog, read_events
    log = EventLog(tmp_path / "e.jsonl", "worker", 0)
    log.emit(Event.TARGET_REACHED, accuracy=0.9)
    log.close()
    assert '"event": "target_reached"' in (tmp_path / "e.jsonl").read_text()
    assert read_events(tmp_path / "e.jsonl")[0]["event"] == Event.TARGET_REACHED
