"""psgd.bench.explain, explain_words and trace on run directories written here, event by
event: each figure is the sum the events imply, the waited-on rank is the one whose pushes
released the parked pulls, ASP names no barrier, and the trace is valid and bounded."""
import json

import pytest
from trace_format import trace_problems

from psgd.bench.explain import SHARD_WAITS, STEP_WAITS, breakdown
from psgd.bench.explain_words import findings, waited_on
from psgd.bench.trace import WAIT, WORKERS_PID, TraceBounds, trace
from psgd.config import dump_config, load_config

COMPUTE_S = {0: 0.01, 1: 0.01, 2: 0.04}  # rank 2 is four times slower
ROUND_TRIP_S = 0.002                      # a round trip nobody waits in
CLOCKS = 20


def _write_run(path, mode, held, waited_on_s, staleness_hist=None, extra_events=(), step_waits=True):
    """A BSP-like run: every clock, each rank computes its COMPUTE_S, then its pull is
    answered when the slowest rank's push arrives (plus ROUND_TRIP_S); a worker's step
    records that wait (wait_s; not before psgd recorded it: `step_waits` false), an all-reduce rank's does not."""
    path.mkdir()
    (path / "config.yaml").write_text(dump_config(load_config(None, [
        f"consistency.mode={mode}", "cluster.workers=3", "cluster.servers=2"])))
    events, t = [], 0.0
    for clock in range(1, CLOCKS + 1):
        slowest = max(COMPUTE_S.values())
        for rank, compute in COMPUTE_S.items():
            wait = slowest - compute if mode != "asp" else 0.0
            comm = wait + ROUND_TRIP_S
            role = "allreduce" if mode == "allreduce" else "worker"
            events.append({"t": t + compute + comm, "role": role, "index": rank, "event": "step", "rank": rank,
                           "clock": clock, "loss": 1.0, "compute_s": compute, "comm_s": comm,
                           "step_s": compute + comm, "gap": 0, **({"wait_s": wait} if role == "worker" and step_waits else {})})
        t += slowest + ROUND_TRIP_S if mode != "asp" else 0.0
    end = max(e["t"] for e in events)
    for shard in range(2 if mode != "allreduce" else 0):
        events.append({"t": end, "role": "server", "index": shard, "event": "server_stats", "version": CLOCKS,
                       "counters": {"pulls_deferred": 2 * CLOCKS if mode == "bsp" else 0}, "busy_s": end * 0.9,
                       "requests": 3 * CLOCKS, "staleness_hist": staleness_hist or {"0": 3 * CLOCKS},
                       "waits": {"held_s": held[shard], "waited_on_s": waited_on_s[shard]}})
    events += extra_events
    events.sort(key=lambda e: e["t"])
    (path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "summary.json").write_text(json.dumps({"wall_time_s": end, "time_to_target_s": None}))
    return path


def _bsp_run(tmp_path):
    waits = [CLOCKS * (COMPUTE_S[2] - COMPUTE_S[r]) for r in range(3)]  # what the shards measured
    held = [waits, [w * 0.5 for w in waits]]                            # shard 1 held them for less
    released = [[0.0, 0.0, sum(waits)], [0.0, 0.0, sum(waits) * 0.5]]
    return _write_run(tmp_path / "bsp", "bsp", held, released), waits


def test_each_worker_s_time_is_the_sum_its_events_imply(tmp_path):
    run, waits = _bsp_run(tmp_path)
    b = breakdown(run)
    for w in b.workers:
        assert w.steps == CLOCKS
        assert w.compute_s == pytest.approx(CLOCKS * COMPUTE_S[w.rank])
        assert w.wait_s == pytest.approx(waits[w.rank])       # its steps' wait_s, summed
        assert w.transfer_s == pytest.approx(CLOCKS * ROUND_TRIP_S)
        assert w.compute_s + w.wait_s + w.transfer_s + w.other_s == pytest.approx(w.span_s)
    assert b.last_at_clock == {2: CLOCKS} and b.clocks_compared == CLOCKS
    assert [s.busy_share for s in b.shards] == pytest.approx([0.9, 0.9])


def test_a_worker_s_wait_is_its_own_steps_waits_and_an_older_run_falls_back_on_the_shards_totals(tmp_path):
    waits = [CLOCKS * (COMPUTE_S[2] - COMPUTE_S[r]) for r in range(3)]  # what the steps recorded
    held = [[w * 0.5 for w in waits], [w * 0.25 for w in waits]]       # the shards' totals: other figures
    released = [[0.0, 0.0, sum(h)] for h in held]
    b = breakdown(_write_run(tmp_path / "steps", "bsp", held, released))
    assert [w.wait_s for w in b.workers] == pytest.approx(waits) and b.wait_source == STEP_WAITS
    assert all(STEP_WAITS in f.source for f in findings(b) if "wait" in f.text and "busy" not in f.text)
    old = breakdown(_write_run(tmp_path / "old", "bsp", held, released, step_waits=False))
    assert [w.wait_s for w in old.workers] == pytest.approx(held[0]) and old.wait_source == SHARD_WAITS
    assert any(SHARD_WAITS in f.source for f in findings(old))


def test_a_simulated_run_s_waits_are_each_worker_s_steps_and_the_slow_one_waits_least(tmp_path):
    from psgd.orchestrate.launchers.sim import SimLauncher
    run = tmp_path / "sim"
    run.mkdir()
    cfg = load_config(None, ["consistency.mode=bsp", "cluster.workers=3", "cluster.servers=2", "task.model=mlp",
                             "task.dataset=digits", "task.batch_size=16", "train.steps_per_worker=15",
                             "eval.enabled=false", "sim.compute_ms=1", "workers.slowdown={2: 4.0}",
                             "cluster.launcher=sim"])
    assert SimLauncher(cfg, run).run().code == 0
    b = breakdown(run)
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    recorded = {r: sum(e["wait_s"] for e in steps if e.get("event") == "step" and e.get("rank") == r)
                for r in range(3)}
    assert b.wait_source == STEP_WAITS
    assert {w.rank: w.wait_s for w in b.workers} == pytest.approx(recorded)
    assert min(recorded[0], recorded[1]) > recorded[2]  # the fast ranks wait at the barrier for the slow one
    assert waited_on(b).rank == 2


def test_under_bsp_the_slow_rank_is_named_with_the_others_wait_share(tmp_path):
    run, waits = _bsp_run(tmp_path)
    b = breakdown(run)
    who = waited_on(b)
    others = [w for w in b.workers if w.rank != 2]
    share = sum(waits[w.rank] for w in others) / sum(w.span_s for w in others)
    assert (who.rank, who.share_of_waits, who.last_share) == (2, 1.0, 1.0)
    assert who.others_wait_share == pytest.approx(share)
    text = findings(b)[0].text
    assert text.startswith("BSP: rank 2 is the one the others wait on") and f"wait {share:.0%} of their time" in text
    assert any("shard 0 is busy 90%" in f.text and "bottleneck" in f.text for f in findings(b))


def test_under_asp_no_barrier_is_named_and_the_staleness_is(tmp_path):
    zero = [[0.0] * 3, [0.0] * 3]
    b = breakdown(_write_run(tmp_path / "asp", "asp", zero, zero, staleness_hist={"0": 10, "1": 40, "5": 10}))
    assert waited_on(b) is None and all(w.wait_s == 0 for w in b.workers)
    said = [f.text for f in findings(b)]
    assert said[0] == "ASP: no barrier and no bound, so no worker waits on another; staleness p95 5 (max 5) at 3 workers"
    assert not any("wait on" in s and "rank" in s for s in said)


def test_a_run_directory_without_steps_is_refused_in_one_line(tmp_path):
    from psgd.config import ConfigError
    with pytest.raises(ConfigError, match="no config.yaml"):
        breakdown(tmp_path)


def test_the_trace_is_valid_and_its_spans_are_the_steps(tmp_path):
    run, _ = _bsp_run(tmp_path)
    doc = trace(run)
    assert trace_problems(doc) == []
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == WORKERS_PID and "cat" not in e]
    assert len(spans) == 2 * 3 * CLOCKS
    rank2 = [e["dur"] for e in spans if e["tid"] == 2 and e["name"] == "compute"]
    assert rank2 == pytest.approx([COMPUTE_S[2] * 1e6] * CLOCKS)
    assert doc["otherData"]["steps"] == "every step in the window"


def test_a_large_trace_is_sampled_and_says_so(tmp_path):
    run, _ = _bsp_run(tmp_path)
    doc = trace(run, TraceBounds(max_steps=15))
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X" and "cat" not in e]
    every = -(-3 * CLOCKS // 15)
    assert len(spans) == 2 * 3 * len(range(0, CLOCKS, every))
    assert doc["otherData"]["steps"] == f"every {every}th step of each worker ({-(-3 * CLOCKS // every)} of {3 * CLOCKS} in the window)"
    assert trace_problems(doc) == []
    window = trace(run, TraceBounds(since_s=0.2, until_s=0.5))
    assert all(0.2e6 <= e["ts"] <= 0.5e6 for e in window["traceEvents"] if e["ph"] != "M")
    assert window["otherData"]["window"] == "0.2 s to 0.5 s"


def _waits(doc) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == WAIT]


def test_each_parked_pull_is_a_wait_span_inside_its_round_trip_named_for_its_rule(tmp_path):
    run, _ = _bsp_run(tmp_path)
    doc = trace(run)
    assert trace_problems(doc) == []
    waits = _waits(doc)
    # Ranks 0 and 1 wait for rank 2 at every clock; rank 2, the last, never waits.
    assert sorted({(e["tid"], e["name"]) for e in waits}) == [(0, "barrier wait"), (1, "barrier wait")]
    assert len(waits) == 2 * CLOCKS
    trips = {(e["tid"], e["args"]["clock"]): e for e in doc["traceEvents"] if e["name"] == "push+pull"}
    for e in waits:
        trip = trips[e["tid"], e["args"]["clock"]]
        assert e["dur"] == pytest.approx((COMPUTE_S[2] - COMPUTE_S[e["tid"]]) * 1e6)
        assert e["args"]["wait_s"] == pytest.approx(COMPUTE_S[2] - COMPUTE_S[e["tid"]])
        assert trip["ts"] <= e["ts"] and e["ts"] + e["dur"] == pytest.approx(trip["ts"] + trip["dur"])


def test_a_live_switch_renames_the_waits_from_its_clock_and_asp_has_none(tmp_path):
    switch = {"t": 0.0, "role": "server", "index": 0, "event": "setting_change", "origin": "ctl",
              "effective_clock": 11, "changes": {"mode": "ssp"}, "setting": {"mode": "ssp", "staleness": 0}}
    waits = [CLOCKS * (COMPUTE_S[2] - COMPUTE_S[r]) for r in range(3)]
    run = _write_run(tmp_path / "switched", "bsp", [waits, waits], [[0.0] * 3] * 2, extra_events=[switch])
    names = {e["args"]["clock"]: e["name"] for e in _waits(trace(run))}
    assert names == {c: "barrier wait" if c < 11 else "staleness-bound wait" for c in range(1, CLOCKS + 1)}
    zero = [[0.0] * 3, [0.0] * 3]
    assert _waits(trace(_write_run(tmp_path / "asp", "asp", zero, zero))) == []


def test_the_checker_catches_what_a_viewer_would_reject():
    good = {"name": "compute", "ph": "X", "pid": 1, "tid": 0, "ts": 10.0, "dur": 5.0}
    assert trace_problems({"traceEvents": [good]}) == []
    assert trace_problems({"traceEvents": [good, {**good, "ts": 12.0}]})  # overlapping spans
    assert trace_problems({"traceEvents": [good, {**good, "ts": 12.0, "dur": 3.0}]}) == []  # nested: it ends inside
    assert trace_problems({"traceEvents": [good, {**good, "ts": 12.0, "dur": 1.0}, {**good, "ts": 14.0}]})
    assert trace_problems({"traceEvents": [good, {**good, "ts": 5.0, "dur": 1.0}]})  # time going back
    assert trace_problems({"traceEvents": [{**good, "ph": "B"}]})  # never ended
    assert trace_problems({"traceEvents": [{k: v for k, v in good.items() if k != "pid"}]})
    assert trace_problems([good])


def test_release_spread_and_shard_busy_per_clock_the_sim_validation_script_reads(tmp_path):
    from psgd.bench.explain import release_spreads_s, run_events, shard_busy_per_clock_s, worker_steps
    run, _ = _bsp_run(tmp_path)
    events = run_events(run)
    steps = worker_steps(events)
    late = {**steps[0], "t": steps[0]["t"] + 0.003}  # one rank's parameters of its clock arrive 3 ms later
    spreads = release_spreads_s([late] + steps[1:], 3)
    assert sorted(spreads) == pytest.approx([0.0] * (CLOCKS - 1) + [0.003])
    end = max(e["t"] for e in steps)
    assert shard_busy_per_clock_s(events) == pytest.approx(2 * 0.9 * end / CLOCKS)
    assert release_spreads_s(steps, 4) == []  # no clock that a fourth rank reached


def test_the_timeline_draws_every_worker_s_first_steps(tmp_path):
    from psgd.bench.timeline_plot import plot_timeline
    run, _ = _bsp_run(tmp_path)
    out = plot_timeline(trace(run), tmp_path / "timeline.png", "bsp, 3 workers")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_all_reduce_run_names_its_slowest_rank_from_its_steps(tmp_path):
    b = breakdown(_write_run(tmp_path / "ar", "allreduce", [], []))
    assert b.shards == [] and b.last_at_clock == {2: CLOCKS}
    said = findings(b)[0].text
    assert said.startswith("ALLREDUCE: every step ends with an all-reduce") and \
        f"rank 2 is the slowest at 100% of {CLOCKS} steps" in said
