"""The quickstart table: python tabulate.py RUNS_DIR TIMES_FILE, where RUNS_DIR holds
qs-auto<i> and qs-off<i> run directories and TIMES_FILE lines '<name> <seconds>' (GNU time)."""
import json
import sys
from pathlib import Path

runs, times = Path(sys.argv[1]), dict(line.split() for line in open(sys.argv[2]) if line.startswith("qs-"))
print("| run | wire.shared_memory | final test accuracy | time to 0.93, held (s) | training wall time (s) "
      "| updates | connections on shared memory per shard (`shm_attached`) | whole command (s) |")
print("|---|---|---|---|---|---|---|---|")
for i in range(1, 4):
    for path in ("auto", "off"):
        name = f"qs-{path}{i}"
        s = json.loads((runs / name / "summary.json").read_text())
        attached = 0
        for line in open(runs / name / "metrics.jsonl"):
            e = json.loads(line)
            if e.get("role") == "server" and e.get("event") == "server_stats":
                attached = max(attached, e.get("counters", {}).get("shm_attached", 0))
        print(f"| {i} | {'auto (default)' if path == 'auto' else 'off'} | {s['final_test_accuracy']:.4f} | "
              f"{s['time_to_target_s']:.3f} | {s['wall_time_s']:.3f} | {s['total_updates']} | {attached} | {times[name]} |")
