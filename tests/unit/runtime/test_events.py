"""The event log and its readers: one JSON object per line, torn tails left for later."""
import json
import math

import pytest

from psgd.runtime.events import EventLog, EventTail, read_events


def test_event_log_writes_role_index_time_and_fields(tmp_path):
    log = EventLog(tmp_path / "events" / "worker-3.jsonl", "worker", 3)
    log.t0 = 0.0  # far in the past: t is positive
    log.emit("step", loss=float("nan"), clock=2)
    log.close()
    (e,) = read_events(tmp_path / "events" / "worker-3.jsonl")
    assert (e["role"], e["index"], e["event"], e["clock"]) == ("worker", 3, "step", 2)
    assert e["loss"] is None  # non-finite floats become null, so every line stays valid JSON
    assert e["t"] > 0


def test_event_log_stamps_an_event_with_the_moment_it_describes(tmp_path):
    log = EventLog(tmp_path / "evaluator-0.jsonl", "evaluator", 0)
    log.t0 = 0.0
    pulled_at = log.now() - 7.25  # an evaluation of parameters pulled earlier
    log.emit("eval", at=pulled_at, accuracy=0.5)
    log.close()
    (e,) = read_events(tmp_path / "evaluator-0.jsonl")
    assert e["t"] == round(pulled_at, 4) and e["accuracy"] == 0.5


def test_event_log_without_a_path_writes_nothing(tmp_path):
    log = EventLog(None, "server", 0)
    log.emit("ready")
    log.close()
    assert list(tmp_path.iterdir()) == []


def test_read_events_leaves_out_a_torn_last_line_only(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"event": "a"}\n{"event": "b"}\n{"event": "c", "t"')
    assert [e["event"] for e in read_events(path)] == ["a", "b"]
    assert read_events(tmp_path / "missing.jsonl") == []


def test_read_events_names_the_file_of_a_corrupt_line(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"event": "a"}\nnot json\n{"event": "b"}\n')
    with pytest.raises(ValueError, match="e.jsonl"):
        read_events(path)


def test_event_tail_returns_each_complete_line_once(tmp_path):
    path = tmp_path / "e.jsonl"
    tail = EventTail(path)
    assert tail.read() == []  # not written yet
    with open(path, "w") as f:
        f.write(json.dumps({"n": 1}) + "\n" + '{"n": ')
        f.flush()
        assert tail.read() == [{"n": 1}]
        f.write("2}\n")
        f.flush()
        assert tail.read() == [{"n": 2}]
        assert tail.read() == []


def test_event_tail_from_end_skips_what_an_earlier_process_wrote(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"n": 1}\n')
    tail = EventTail(path, from_end=True)
    with open(path, "a") as f:
        f.write('{"n": 2}\n')
    assert tail.read() == [{"n": 2}]
    assert math.isclose(len(path.read_text().splitlines()), 2)
