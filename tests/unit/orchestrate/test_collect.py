"""psgd collect: per-process event files of a multi-host run merged into one summary."""
import json

from psgd.config import load_config
from psgd.orchestrate.records.collect import collect


def _write(run_dir, name, events):
    (run_dir / "events").mkdir(parents=True, exist_ok=True)
    (run_dir / "events" / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_collect_merges_by_time_and_names_missing_hosts(tmp_path):
    cfg = load_config(None, ["cluster.servers=1", "cluster.workers=2", "train.target_accuracy=0.5"])
    _write(tmp_path, "server-0", [{"t": 0.0, "role": "server", "index": 0, "event": "ready"},
                                  {"t": 2.5, "role": "server", "index": 0, "event": "server_stats", "version": 7,
                                   "staleness_hist": {"0": 5, "2": 2}, "clock_gap_hist": {"1": 7}}])
    _write(tmp_path, "worker-0", [{"t": 1.0, "role": "worker", "index": 0, "event": "step", "clock": 1, "loss": 1.0},
                                  {"t": 2.0, "role": "worker", "index": 0, "event": "done", "clock": 1}])
    _write(tmp_path, "evaluator-0", [{"t": 1.5, "role": "evaluator", "index": 0, "event": "eval",
                                      "accuracy": 0.6, "test_loss": 0.9, "final": True}])
    summary = collect(tmp_path, cfg)
    merged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [e["t"] for e in merged] == [0.0, 1.0, 1.5, 2.0, 2.5]
    assert summary["missing_events"] == ["worker-1"]  # that host's events were not gathered
    assert summary["wall_time_s"] == 2.0 and summary["total_updates"] == 7
    assert summary["final_test_accuracy"] == 0.6 and summary["time_to_target_s"] == 1.5
    assert summary["staleness_max"] == 2 and summary["max_clock_gap"] == 1
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_the_command_finds_a_hand_started_roles_config_and_prints_one_line(tmp_path, capsys):
    from psgd.cli import main
    from psgd.orchestrate.roles import keep_config
    cfg = load_config(None, ["cluster.servers=1", "cluster.workers=1", "train.target_accuracy=0.5"])
    assert main(["collect", str(tmp_path)]) == 2  # no config yet: says how to give one
    assert "has no config.yaml" in capsys.readouterr().err
    keep_config(tmp_path, cfg)  # what every hand-started role does first
    keep_config(tmp_path, load_config(None, ["cluster.workers=3"]))  # a later one leaves the first's
    _write(tmp_path, "server-0", [{"t": 2.5, "role": "server", "index": 0, "event": "server_stats", "version": 4}])
    _write(tmp_path, "worker-0", [{"t": 1.0, "role": "worker", "index": 0, "event": "step", "clock": 1, "loss": 1.0}])
    assert main(["collect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out == (f"collected {tmp_path}: asp accuracy —, 4 updates, 1 worker steps in 1.00 s, time to target not "
                   "reached; no events from evaluator-0 -> metrics.jsonl, summary.json\n")
    assert main(["collect", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workers"] == 1
