"""A checker for the Chrome trace event format (the JSON object form) that `psgd trace`
writes: what Perfetto and chrome://tracing need of each event, per track."""
from collections import defaultdict

_PHASES = {"X", "B", "E", "i", "I", "C", "M"}


def trace_problems(doc) -> list[str]:
    """Every violation found ([] for a valid trace): the object form with a traceEvents
    list; each event's required fields by phase; per track (pid, tid) timestamps that
    never go back, complete spans that either follow one another or nest (a span that
    starts inside another ends inside it), B/E spans that balance."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not the JSON object format: no traceEvents list"]
    problems, last_ts, span_ends, open_spans = [], {}, defaultdict(list), defaultdict(list)
    for n, e in enumerate(doc["traceEvents"]):
        where = f"event {n} ({e.get('name')!r})"
        for key, kind in (("name", str), ("ph", str), ("pid", int), ("tid", int)):
            if not isinstance(e.get(key), kind):
                problems.append(f"{where}: {key} missing or not {kind.__name__}")
        ph = e.get("ph")
        if ph not in _PHASES:
            problems.append(f"{where}: unknown phase {ph!r}")
            continue
        if ph == "M":
            if not isinstance((e.get("args") or {}).get("name"), str):
                problems.append(f"{where}: metadata without args.name")
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or ts < 0:
            problems.append(f"{where}: ts missing or negative")
            continue
        track = (e.get("pid"), e.get("tid"))
        if ts < last_ts.get(track, 0):
            problems.append(f"{where}: ts {ts} before the track's previous {last_ts[track]}")
        last_ts[track] = ts
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                problems.append(f"{where}: complete span without a dur >= 0")
                continue
            enclosing = span_ends[track]
            while enclosing and enclosing[-1] <= ts + 1e-6:  # spans that ended before this one starts
                enclosing.pop()
            if enclosing and ts + dur > enclosing[-1] + 1e-6:
                problems.append(f"{where}: overlaps the track's previous span (ends {enclosing[-1]}) "
                                "without lying inside it")
            enclosing.append(ts + dur)
        elif ph == "B":
            open_spans[track].append(e.get("name"))
        elif ph == "E":
            if not open_spans[track]:
                problems.append(f"{where}: E without a B on its track")
            else:
                open_spans[track].pop()
        elif ph == "C" and not all(isinstance(v, (int, float)) for v in (e.get("args") or {None: None}).values()):
            problems.append(f"{where}: counter without numeric args")
        elif ph in ("i", "I") and e.get("s", "t") not in ("g", "p", "t"):
            problems.append(f"{where}: instant with scope {e.get('s')!r}")
    problems += [f"track {t}: {len(names)} B span(s) never ended" for t, names in open_spans.items() if names]
    return problems
