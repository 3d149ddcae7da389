"""What the Ray launch tests compare in a run directory and read about processes
(tests/e2e/test_ray_two_nodes.py)."""
from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def tree(run_dir: Path) -> dict[str, list[str]]:
    """Top-level entries and the files inside each folder of a run directory."""
    found = {".": sorted(p.name for p in run_dir.iterdir())}
    for sub in run_dir.iterdir():
        if sub.is_dir():
            names = sorted(p.name for p in sub.iterdir())
            # TensorBoard names its files by host, time and pid: compare their number only. A shard's
            # push logs are numbered by the snapshot they follow (checkpoint.every_s): a run a few
            # seconds longer has later numbers, so compare the files, not their numbers.
            if sub.name == "checkpoints":
                names = sorted(re.sub(r"\.log\.\d+$", ".log.N", n) for n in names)
            found[sub.name] = len(names) if sub.name == "tensorboard" else names
    return found


def check_exports(run_dir: Path) -> None:
    """metrics.csv has one row per evaluation; TensorBoard has accuracy and staleness."""
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if '"event": "eval"' in line]
    with open(run_dir / "metrics.csv", newline="") as f:  # pandas is not among psgd's dependencies
        rows = list(csv.DictReader(f))
    assert [float(r["test_accuracy"]) for r in rows] == [e["accuracy"] for e in evals]
    assert [int(r["updates"]) for r in rows] == [max(e["versions"]) for e in evals]
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert [s.value for s in acc.Scalars("test/accuracy")] == pytest.approx([e["accuracy"] for e in evals])
    assert len(acc.Scalars("staleness/mean")) == len(evals) and acc.Histograms("staleness")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
