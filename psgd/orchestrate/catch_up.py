"""Events a killed launcher never merged, picked up by `psgd launch --resume`.

Each child appends to its own RUN_DIR/events/ROLE-INDEX.jsonl and the
launcher copies every line, in order, into metrics.jsonl. When the launcher
is killed, its children may still write a few lines (their last steps, a
final `done`) before they notice and stop; those never reach metrics.jsonl,
and a resumed run that only reads metrics.jsonl undercounts steps. Since each
file is merged in order from its first line, the lines of ROLE-INDEX already
in metrics.jsonl are exactly the first N lines of its file: the rest is new.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

__all__ = ["unmerged_events"]


def unmerged_events(events_dir: Path, merged: list[dict]) -> list[dict]:
    """Events in `events_dir`/*.jsonl that are not among `merged` yet, file by file.
    A torn last line (the child was killed mid-write) is skipped."""
    seen = Counter((e.get("role"), e.get("index")) for e in merged)
    out = []
    for path in sorted(Path(events_dir).glob("*.jsonl")):
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        parsed = []
        for ln in lines:
            try:
                parsed.append(json.loads(ln))
            except ValueError:
                continue  # cut short by a kill
        if not parsed:
            continue
        key = (parsed[0].get("role"), parsed[0].get("index"))
        out += parsed[seen.get(key, 0):]
    return out
