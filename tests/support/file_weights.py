"""The order test files run in: heaviest first, by the seconds each took in a measured run.

Two xdist workers take files in collection order (`--dist loadfile --no-loadscope-reorder`),
each the next file when it runs low, so with the heavy files first the light ones fill the
end and both workers finish together. The weights are measured, not typed: a run with
PSGD_TEST_DURATIONS=FILE appends every test phase's seconds to FILE, and

    python tests/support/file_weights.py FILE

sums them per file into tests/file_weights.json. A file missing from it (a new one) weighs
the median e2e file if it is under tests/e2e, else nothing.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

WEIGHTS = Path(__file__).resolve().parents[1] / "file_weights.json"
ENV = "PSGD_TEST_DURATIONS"


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


def order(items: list) -> None:
    """Sort `items` in place: files by weight, heaviest first; within a file, as collected."""
    weights = json.loads(WEIGHTS.read_text()) if WEIGHTS.is_file() else {}
    e2e = [w for f, w in weights.items() if f.startswith("tests/e2e/")]
    new_e2e = statistics.median(e2e) if e2e else 0.0

    def weight(item) -> float:
        f = _file(item.nodeid)
        return weights.get(f, new_e2e if f.startswith("tests/e2e/") else 0.0)

    items.sort(key=lambda item: -weight(item))


def record(report) -> None:
    target = os.environ.get(ENV)
    # Under xdist the controller sees every report again, with the worker that ran it as `.node`.
    if target and not hasattr(report, "node"):
        with open(target, "a") as out:
            out.write(f"{report.nodeid}\t{report.duration:.3f}\n")


def main(durations: str) -> int:
    per_file: dict[str, float] = {}
    for line in Path(durations).read_text().splitlines():
        nodeid, seconds = line.rsplit("\t", 1)
        per_file[_file(nodeid)] = per_file.get(_file(nodeid), 0.0) + float(seconds)
    ranked = dict(sorted(((f, round(s, 1)) for f, s in per_file.items()), key=lambda kv: -kv[1]))
    WEIGHTS.write_text(json.dumps(ranked, indent=1) + "\n")
    print(f"{len(ranked)} files, {sum(ranked.values()):.0f} s in all -> {WEIGHTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
