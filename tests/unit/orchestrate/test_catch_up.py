"""Events written after the launcher died are found, once, on resume."""
import json

from psgd.orchestrate.catch_up import unmerged_events


def test_only_lines_past_the_merged_ones_are_returned(tmp_path):
    worker = [{"role": "worker", "index": 0, "event": "step", "clock": c} for c in range(5)]
    server = [{"role": "server", "index": 1, "event": "server_stats", "version": v} for v in range(3)]
    (tmp_path / "worker-0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in worker))
    (tmp_path / "server-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in server) + '{"role": "ser')
    launcher = [{"role": "launcher", "index": 0, "event": "restart"}]
    merged = worker[:3] + server[:3] + launcher
    new = unmerged_events(tmp_path, merged)
    assert new == worker[3:]
    assert unmerged_events(tmp_path, merged + new) == []
