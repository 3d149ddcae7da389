"""What a run's live settings became: the setting in force at the end and
every change on the way (psgd ctl, the adaptive bound), as clock, key,
old -> new, read from the shards' setting_change events.

Every shard records each change at the same effective clock; shard 0's
record is the run's (the others' are the same change)."""
from __future__ import annotations

from typing import Iterable, Optional

from psgd.config import Config
from psgd.runtime.event_names import Event

__all__ = ["setting_history", "SETTING_KEYS"]

# A live setting's field -> the config key it changes (the key `psgd ctl set` takes).
SETTING_KEYS = {"mode": "consistency.mode", "staleness": "consistency.staleness", "lr": "optimizer.lr"}


def _initial(cfg: Config) -> dict:
    c = cfg.consistency
    return {"mode": c.mode.value, "staleness": c.staleness, "lr": cfg.optimizer.lr}


def setting_history(cfg: Config, events: Iterable[dict]) -> tuple[Optional[dict], list[dict]]:
    """(the final setting {mode, staleness, lr}, or None when nothing changed;
    the changes in clock order, each {clock, origin, key, old, new})."""
    records = sorted((e for e in events if e.get("event") == Event.SETTING_CHANGE and e.get("index", 0) == 0),
                     key=lambda e: e["effective_clock"])
    if not records:
        return None, []
    current, changes = _initial(cfg), []
    for e in records:
        new = e.get("setting") or {}
        for field, key in SETTING_KEYS.items():
            if field in new and new[field] != current[field]:
                changes.append({"clock": int(e["effective_clock"]), "origin": e.get("origin"), "key": key,
                                "old": current[field], "new": new[field]})
                current[field] = new[field]
    return dict(current), changes
