"""`psgd sim calibrate`: the sim: section is computed from the run's events as documented,
and a damaged run directory is one line of error, never a traceback."""
import json
import math
import random
import statistics
import tarfile
from pathlib import Path

import pytest
import yaml

from psgd.cli import main
from psgd.config import ConfigError, dump_config, load_config
from psgd.sim.calibrate import calibrate
from psgd.sim.plan import model_plans
from psgd.sim.time_model import TimeModel
from psgd.tasks import task_shape
from psgd.wire.codecs import CODECS

NUMEL = 1000


def _write(tmp_path, cfg, steps, busy=(0.005, 0.007), requests=(1000, 1000), pushes=None, hosts=None):
    """`hosts`: the (host, cores) each shard's ready event records (None: none recorded)."""
    (tmp_path / "config.yaml").write_text(dump_config(cfg))
    events = [{"t": 0.0, "role": "server", "index": s, "event": "ready", "numel": NUMEL,
               **({"host": hosts[s][0], "cores": hosts[s][1]} if hosts else {})} for s in range(2)]
    events += sorted(steps, key=lambda e: e["t"])
    events += [{"t": 9.0, "role": "server", "index": s, "event": "server_stats", "final": True, "busy_s": busy[s],
                "requests": requests[s]} for s in range(2)]
    counts = pushes or {r: sum(1 for e in steps if e["rank"] == r) for r in {e["rank"] for e in steps}}
    events += [{"t": 9.0, "role": "worker", "index": r, "event": "done", "pushes": n, "bytes_sent": n * 2 * 4 * NUMEL}
               for r, n in counts.items()]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def _step(rank, t, clock, compute_s, comm_s):
    return {"t": t, "role": "worker", "index": rank, "event": "step", "rank": rank, "clock": clock, "loss": 1.0,
            "compute_s": compute_s, "comm_s": comm_s, "step_s": compute_s + comm_s, "gap": 0}


def _asp_run(tmp_path, own_ms, comm_ms, workers=2, **kw):
    """Each rank steps back to back: its own time, then its round trip, again and again."""
    cfg = load_config(None, ["cluster.servers=2", f"cluster.workers={workers}", "consistency.mode=asp"])
    steps = []
    for rank in range(workers):
        t = 0.0
        for k, (own, comm) in enumerate(zip(own_ms(rank), comm_ms)):
            t += (own + comm) / 1e3
            steps.append(_step(rank, t, k + 1, own / 1e3, comm / 1e3))
    _write(tmp_path, cfg, steps, **kw)
    return cfg


def test_the_section_comes_from_the_events(tmp_path):
    comm = [1.0 + 0.1 * i for i in range(11)]  # mean 1.5 ms
    cfg = _asp_run(tmp_path, lambda rank: [3.0] * 11, comm)
    found = calibrate(tmp_path)
    assert found.sim["compute_ms"] == pytest.approx(3.0)
    assert found.sim["compute_jitter"] == 0.0 and found.sim["worker_spread"] == 0.0  # every step took 3 ms
    pushes = 2 * 11
    service_s = (0.005 + 0.007) / 2 / pushes  # each shard served every push
    apply_s = 4 * NUMEL / (cfg.sim.apply_gbytes_per_s * 1e9)
    assert found.sim["request_us"] == pytest.approx((service_s - apply_s) * 1e6, abs=1e-3)
    # Both shards' pushes leave through the worker's one link, and both replies come back through it.
    transfers_s = 2 * (4 * NUMEL + 4 * NUMEL) / (cfg.sim.bandwidth_gbps * 1e9 / 8)
    # comm of the 2nd..11th steps (the first has no step before it to time its own part): all of them under asp
    mean_comm_s = statistics.fmean(comm) / 1e3
    # The two ranks step in lock-step: of each pair of pushes that leave together, one waits a service at
    # the shard, which the simulator's queue charges itself: half a service on average is not the network's.
    assert found.evidence["push_queue_ms_mean"] == pytest.approx(service_s / 2 * 1e3, abs=1e-6)  # rounded to ns
    assert found.sim["latency_us"] == pytest.approx((mean_comm_s - service_s / 2 - service_s - transfers_s) / 4 * 1e6,
                                                    abs=1e-3)
    assert set(found.sim) == {"compute_ms", "compute_jitter", "worker_spread", "request_us", "latency_us"}
    # The calibrated config is a valid config with exactly that section.
    again = load_config(yaml.safe_load(dump_config(found.config(cfg))))
    assert again.sim.compute_ms == found.sim["compute_ms"] and again.sim.latency_us == found.sim["latency_us"]


def test_replies_in_a_reply_encoding_are_charged_at_their_size_and_their_decode(tmp_path):
    # A run whose replies were int8: the workers counted what the replies carried against fp32.
    comm = [1.0 + 0.1 * i for i in range(11)]
    _asp_run(tmp_path, lambda rank: [3.0] * 11, comm)
    plain = calibrate(tmp_path)  # the same run with fp32 replies
    cfg = load_config(None, ["cluster.servers=2", "cluster.workers=2", "consistency.mode=asp",
                             "wire.compression={replies: int8}"])
    (tmp_path / "config.yaml").write_text(dump_config(cfg))
    events = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for e in events:
        if e["event"] == "done":
            e["pull_fp32_bytes"] = 11 * 2 * 4 * NUMEL
            e["pull_bytes"] = 11 * 2 * (NUMEL + 4 * (NUMEL // 64 + 1))  # a byte a value, a scale a block
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    found = calibrate(tmp_path)
    reply_bytes = round(4 * NUMEL * (NUMEL + 4 * (NUMEL // 64 + 1)) / (4 * NUMEL))
    assert found.evidence["reply_bytes_per_shard"] == reply_bytes < 4 * NUMEL
    model = TimeModel.for_run(cfg, found.sim["compute_ms"], ())  # fp32 pushes: no codec time either way
    link_s = 1 / (cfg.sim.bandwidth_gbps * 1e9 / 8)
    # Less time on the wire and the decode the simulator charges itself: both return to the latency.
    saved_s = 2 * (4 * NUMEL - reply_bytes) * link_s - model.after_pull_s(2 * NUMEL)
    assert model.after_pull_s(2 * NUMEL) > 0
    assert found.sim["latency_us"] == pytest.approx(plain.sim["latency_us"] + saved_s / 4 * 1e6, abs=2e-3)


def test_the_compute_spread_becomes_the_jitter_and_its_mean_the_step(tmp_path):
    # Own times that are a lognormal's exact quantiles: median 20 ms, CV 0.4.
    cv, n = 0.4, 2001
    sigma = math.sqrt(math.log1p(cv ** 2))
    normal = statistics.NormalDist()
    own = [20.0 * math.exp(sigma * normal.inv_cdf((i + 0.5) / n)) for i in range(n)]
    random.Random(0).shuffle(own)
    _asp_run(tmp_path, lambda rank: own, [1.0] * n, workers=1)
    found = calibrate(tmp_path)
    assert found.sim["compute_jitter"] == pytest.approx(cv, rel=0.01)
    assert found.sim["compute_ms"] == pytest.approx(statistics.fmean(own[1:]), rel=1e-6)  # the sample mean


def test_a_persistent_difference_between_ranks_becomes_the_spread(tmp_path):
    # Rank r always takes 10 x (1 + 0.2 r) ms: no jitter, a spread of the four means.
    means = [10.0 * (1 + 0.2 * r) for r in range(4)]
    _asp_run(tmp_path, lambda rank: [means[rank]] * 30, [1.0] * 30, workers=4)
    found = calibrate(tmp_path)
    assert found.sim["compute_jitter"] == 0.0
    assert found.sim["worker_spread"] == pytest.approx(statistics.pstdev(means) / statistics.fmean(means), abs=1e-4)


def test_the_bsp_barrier_is_not_booked_as_latency(tmp_path):
    # Rank 0 computes 1 ms, rank 1 5 ms; a round trip takes 1 ms once the clock completes.
    # Rank 0's comm_s also holds 4 ms of waiting for rank 1 at the barrier: not the network's.
    cfg = load_config(None, ["cluster.servers=2", "cluster.workers=2", "consistency.mode=bsp"])
    steps, t = [], 0.0
    for k in range(20):
        sent0, sent1 = t + 1e-3, t + 5e-3
        t = sent1 + 1e-3
        steps += [_step(0, t, k + 1, 1e-3, t - sent0), _step(1, t, k + 1, 5e-3, t - sent1)]
    _write(tmp_path, cfg, steps)
    found = calibrate(tmp_path)
    assert found.evidence["unwaited_comm_ms_mean"] == pytest.approx(1.0)
    service_s = (0.005 + 0.007) / 2 / 40
    transfers_s = 2 * 8 * NUMEL / (cfg.sim.bandwidth_gbps * 1e9 / 8)  # 2 shards' pushes and replies, one link
    # Both pulls are released together: rank 1's reply leaves after rank 0's half the time.
    reply_queue_s = 0.5 * 4 * NUMEL / (cfg.sim.bandwidth_gbps * 1e9 / 8)
    assert found.sim["latency_us"] == pytest.approx((1e-3 - service_s - transfers_s - reply_queue_s) / 4 * 1e6,
                                                    abs=1e-3)


def test_the_waits_behind_a_clocks_other_pushes_and_replies_are_not_booked_as_latency(tmp_path):
    # BSP, 4 workers whose pushes of a clock leave 0.2 ms apart; each shard serves a push in 1 ms, one at a
    # time. The last push of a clock finds the three before it still queued: it starts 3 x 1 - 3 x 0.2 =
    # 2.4 ms after it arrived. Then the clock is complete: the shard releases the four replies together,
    # which the simulator sends in a seeded order, the last pusher's 1.5 replies late on average; then
    # 4 x 50 us of links (plus the service and the transfers). Both waits are the simulator's own queues.
    cfg = load_config(None, ["cluster.servers=2", "cluster.workers=4", "consistency.mode=bsp"])
    latency_s, service_s, clocks = 50e-6, 1e-3, 20
    link_bytes_per_s = cfg.sim.bandwidth_gbps * 1e9 / 8
    transfers_s = 2 * 8 * NUMEL / link_bytes_per_s  # 2 shards' pushes and replies, one link
    reply_queue_s = 1.5 * 4 * NUMEL / link_bytes_per_s
    steps, t = [], 0.0
    for k in range(clocks):
        sent = [t + 3e-3 + 0.2e-3 * r for r in range(4)]
        t = sent[-1] + 2.4e-3 + service_s + reply_queue_s + transfers_s + 4 * latency_s
        steps += [_step(r, t, k + 1, 3e-3, t - sent[r]) for r in range(4)]
    busy = clocks * 4 * service_s
    _write(tmp_path, cfg, steps, busy=(busy, busy), requests=(4 * clocks, 4 * clocks))
    found = calibrate(tmp_path)
    assert found.evidence["unwaited_round_trips"] == clocks
    assert found.evidence["push_queue_ms_mean"] == pytest.approx(2.4)
    assert found.evidence["reply_queue_ms_mean"] == pytest.approx(reply_queue_s * 1e3, abs=1e-6)
    assert found.sim["latency_us"] == pytest.approx(latency_s * 1e6, abs=1e-3)


def test_a_round_trip_faster_than_the_service_gives_no_negative_latency(tmp_path):
    _asp_run(tmp_path, lambda rank: [3.0] * 11, [0.1] * 11, busy=(5.0, 5.0))
    assert calibrate(tmp_path).sim["latency_us"] == 0.0


ONE_HOST = [("a", 2), ("a", 2)]


def test_a_run_with_more_busy_processes_than_cores_is_called_cpu_bound(tmp_path):
    _asp_run(tmp_path, lambda rank: [3.0] * 11, [1.0] * 11, workers=4, hosts=ONE_HOST)  # 4 computing 3 of 4 ms
    found = calibrate(tmp_path)
    load = (4 * 11 * 3e-3 + 0.012) / 0.044
    assert found.evidence["cpu_load"] == pytest.approx(load, rel=1e-3)
    assert found.evidence["cores"] == 2 and "CPU-bound" in found.warnings[0] and "its 2 cores" in found.warnings[0]
    _asp_run(tmp_path, lambda rank: [3.0] * 11, [1.0] * 11, workers=1, busy=(0.001, 0.001), hosts=ONE_HOST)
    assert calibrate(tmp_path).warnings == []


def test_the_load_is_judged_against_the_runs_hosts_not_the_calibrating_machine(tmp_path, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 1)  # calibrated on a one-core machine: beside the point
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0}, raising=False)
    # The same 3.1 busy processes, on two hosts of 2 cores each (4 in all): not CPU-bound.
    _asp_run(tmp_path, lambda rank: [3.0] * 11, [1.0] * 11, workers=4, hosts=[("a", 2), ("b", 2)])
    found = calibrate(tmp_path)
    assert found.evidence["cores"] == 4 and found.evidence["cpu_load"] < 4 and found.warnings == []
    # A run that recorded no cores is not judged at all.
    _asp_run(tmp_path, lambda rank: [3.0] * 11, [1.0] * 11, workers=4)
    found = calibrate(tmp_path)
    assert found.evidence["cores"] is None and found.warnings == []


def test_a_stated_device_time_is_a_wait_not_a_busy_core(tmp_path):
    # The same 4 workers as above, but each step's 3 ms is workers.device_ms: a sleep.
    cfg = _asp_run(tmp_path, lambda rank: [3.0] * 11, [1.0] * 11, workers=4, hosts=ONE_HOST)
    (tmp_path / "config.yaml").write_text(dump_config(load_config(yaml.safe_load(dump_config(cfg)),
                                                                  ["workers.device_ms=3"])))
    found = calibrate(tmp_path)
    assert found.evidence["cpu_load"] == pytest.approx(0.012 / 0.044, rel=1e-3)  # the shards' service alone
    assert found.evidence["cpu_load_counts_compute"] is False and found.warnings == []


def test_runs_that_cannot_calibrate_say_why(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        calibrate(tmp_path)
    _asp_run(tmp_path, lambda rank: [3.0] * 3, [1.0] * 3, workers=1)
    with pytest.raises(ConfigError, match="too few"):
        calibrate(tmp_path)


def _damage(run_dir, how):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]

    def without(event, key):
        return [{k: v for k, v in e.items() if not (e["event"] == event and k == key)} for e in events]

    def rewrite(evs):
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))

    if how in ("compute_s", "comm_s", "t", "rank"):
        rewrite(without("step", how))
    elif how == "busy_s":
        rewrite(without("server_stats", how))
    elif how == "numel":
        rewrite(without("ready", how))
    elif how == "zero_compute":
        rewrite([{**e, "compute_s": 0.0} if e["event"] == "step" else e for e in events])
    elif how == "string_compute":
        rewrite([{**e, "compute_s": "fast"} if e["event"] == "step" else e for e in events])
    elif how == "summary_list":
        (run_dir / "summary.json").write_text("[1, 2]")
    elif how == "summary_garbled":
        (run_dir / "summary.json").write_text("{not json")
    elif how == "garbled_line":
        (run_dir / "metrics.jsonl").write_text("\n".join(lines[:5] + ["{garbled"] + lines[5:]) + "\n")
    elif how == "byte_ff":
        (run_dir / "metrics.jsonl").write_bytes(b"\xff" + (run_dir / "metrics.jsonl").read_bytes())
    elif how == "not_an_object":
        (run_dir / "metrics.jsonl").write_text("\n".join(lines[:5] + ["[1, 2]"] + lines[5:]) + "\n")
    elif how == "no_metrics":
        (run_dir / "metrics.jsonl").unlink()
    elif how == "config_garbled":
        (run_dir / "config.yaml").write_text("cluster: [")


DAMAGE = ["compute_s", "comm_s", "t", "rank", "busy_s", "numel", "zero_compute", "string_compute", "summary_list",
          "summary_garbled", "garbled_line", "byte_ff", "not_an_object", "no_metrics", "config_garbled"]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_run_directory_is_one_line_and_a_nonzero_exit(tmp_path, capsys, how):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _asp_run(run_dir, lambda rank: [3.0] * 11, [1.0] * 11)
    (run_dir / "summary.json").write_text(json.dumps({"clock": "wall"}))
    assert main(["sim", "calibrate", str(run_dir)]) == 0  # whole, it calibrates
    capsys.readouterr()
    _damage(run_dir, how)
    assert main(["sim", "calibrate", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psgd sim calibrate: ") and err.count("\n") == 1 and "Traceback" not in err, err


def test_out_into_a_missing_directory_or_onto_a_directory_is_refused(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _asp_run(run_dir, lambda rank: [3.0] * 11, [1.0] * 11)
    for out, why in ((tmp_path / "missing" / "cal.yaml", "does not exist"), (tmp_path, "is a directory")):
        assert main(["sim", "calibrate", str(run_dir), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1
    assert not (tmp_path / "missing").exists()
    assert main(["sim", "calibrate", str(run_dir), "--out", str(tmp_path / "cal.yaml")]) == 0
    assert load_config(tmp_path / "cal.yaml").sim.compute_ms == pytest.approx(3.0)


H200_RUNS = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "results" / "runs.tar.gz"


def test_the_h200_runs_fit_about_one_network_whichever_mode_ran(tmp_path):
    # The two real MNIST-1D runs of benchmarks/gpu (4 workers on one H200, 2 shards, one host): the same
    # links under ASP and under BSP. BSP's last round trip of a clock also holds a wait behind the clock's
    # other pushes and its other replies, which the simulator queues itself: taken out, the two fits are
    # 302 and 359 us (before, 462 and 927). What is left apart is the reply order: the real shard answers
    # the last pusher last in most clocks (0.68 ms behind the first reply), the simulator's seeded order
    # 1.5 replies (0.39 ms) on average, and calibrate takes out only what the simulator will charge.
    with tarfile.open(H200_RUNS) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if m.name.startswith("mnist1d-")],
                       filter="data")
    asp, bsp = calibrate(tmp_path / "mnist1d-asp"), calibrate(tmp_path / "mnist1d-bsp")
    assert bsp.evidence["push_queue_ms_mean"] > 1.0 and asp.evidence["reply_queue_ms_mean"] == 0.0
    reply_s = 4 * 204037 / (25e9 / 8)  # a shard's 204,037 parameters over its 25 Gb/s link
    assert bsp.evidence["reply_queue_ms_mean"] == pytest.approx(1.5 * reply_s * 1e3, rel=1e-3)  # 4 released
    assert bsp.sim["latency_us"] == pytest.approx(asp.sim["latency_us"], rel=0.25)
    # The runs recorded no cores (made before ready events carried them): their 16-core host is not judged
    # by this machine's cores.
    assert asp.evidence["cores"] is None and asp.warnings == [] and bsp.warnings == []


def test_each_shard_is_charged_its_own_push_codecs(tmp_path):
    # The same events under int8 for every push and under int8 with the small tensors fp32 (by tensor):
    # shard 0 decodes 2405 int8 values either way (the MLP's weight), shard 1 only 1691 (its tail is fp32).
    comm = [1.0 + 0.1 * i for i in range(11)]
    found = {}
    for name, compression in (("int8", "int8"), ("tensor", "{default: int8, small: none, small_below: 100, "
                                                           "choose_by: tensor}"),
                              ("none", "none"), ("small", "{default: int8, small: none, small_below: 1001}")):
        _asp_run(tmp_path, lambda rank: [3.0] * 11, comm)
        cfg = load_config(None, ["cluster.servers=2", "cluster.workers=2", "consistency.mode=asp",
                                 f"wire.compression={compression}"])
        (tmp_path / "config.yaml").write_text(dump_config(cfg))
        found[name] = calibrate(tmp_path)
    # Per shard, on the shard sizes the run recorded: both shards' NUMEL are below small_below, so fp32.
    assert found["small"].sim == found["none"].sim != found["int8"].sim
    cfg = load_config(None, ["cluster.servers=2", "wire.compression={default: int8, small: none, small_below: 100, "
                             "choose_by: tensor}"])
    layout, plans = model_plans(cfg, task_shape(cfg))
    int8_runs = [sum(r.numel for r in plan if r.encoding == "int8") for plan in plans]
    assert int8_runs[0] == layout.shard_sizes[0] > int8_runs[1]
    cost = CODECS["int8"].cost
    decode_s = lambda n: 4 * n / (cost.decode_gbytes_per_s * 1e9)  # noqa: E731
    encode_s = lambda n: 4 * n / (cost.encode_gbytes_per_s * 1e9)  # noqa: E731
    service_s = (0.005 + 0.007) / 2 / (2 * 11)
    apply_s = 4 * NUMEL / (cfg.sim.apply_gbytes_per_s * 1e9)
    assert found["tensor"].sim["request_us"] == pytest.approx((service_s - decode_s(int8_runs[0]) - apply_s) * 1e6,
                                                              abs=1e-3)
    # Each worker's encode before its push: both shards' values at int8's rate, against each shard's int8 run.
    saved_s = encode_s(2 * NUMEL) - sum(encode_s(n) for n in int8_runs)
    assert found["tensor"].sim["latency_us"] == pytest.approx(found["int8"].sim["latency_us"] + saved_s / 4 * 1e6,
                                                              abs=2e-3)
