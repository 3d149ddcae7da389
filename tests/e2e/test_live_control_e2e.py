"""End-to-end live control: `psgd ctl` changes a running launch at one clock on
every shard, and refuses a request without the run token."""
import json
import re
import shutil
import signal
import subprocess

import pytest
from conftest import launch, psgd_cmd, read_events, run_psgd, spawn, stop, wait_for, worker_clock, write_config

pytestmark = pytest.mark.e2e




def ctl(run_dir, *args, cwd):
    code, out, err = run_psgd("ctl", str(run_dir), *args, cwd=cwd, timeout=60)
    return code, out + err


@pytest.mark.timeout(180)
def test_ctl_changes_bound_then_mode_at_one_clock_on_every_shard(tmp_path):
    config = write_config(
        tmp_path / "config.yaml",
        cluster={"servers": 2, "workers": 3, "timeout_s": 10.0, "heartbeat_s": 0.5, "request_timeout_s": 10.0},
        consistency={"mode": "ssp", "staleness": 0},
        train={"steps_per_worker": 1000000, "max_time_s": 120, "target_accuracy": None},
        eval={"every_s": 1.0},
        # a persistent 5x straggler: the fast workers run into any bound in force
        workers={"device": "cpu", "slowdown": {2: 5.0}, "device_ms": 20},  # stated device time: few cores used
    )
    run = tmp_path / "run"
    launcher = spawn(psgd_cmd("launch", str(config), "--out", str(run), "--quiet"),
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    try:
        assert wait_for(lambda: worker_clock(run) >= 10, timeout=60), "the run never got going"

        # Without the token: the CLI refuses before contacting a shard...
        stranger = tmp_path / "stranger"
        stranger.mkdir()
        for name in ("config.yaml", "processes.json"):
            shutil.copy(run / name, stranger / name)
        code, out = ctl(stranger, "set", "consistency.staleness=4", cwd=tmp_path)
        assert code == 1 and "no run token" in out
        # ...and a shard refuses a CONTROL request with a wrong token (see raw_control below).
        for address in raw_addresses(run):
            assert raw_control(address, token="not-the-token") == ("bad_token", None)
            assert raw_control(address, token="") == ("bad_token", None)

        code, out = ctl(run, "set", "consistency.staleness=4", cwd=tmp_path)
        assert code == 0, out
        first = int(re.search(r"from clock (\d+) on all 2 shards", out).group(1))
        assert wait_for(lambda: worker_clock(run) >= first + 40, timeout=60)

        code, out = ctl(run, "set", "consistency.mode=asp", "optimizer.lr=0.05", cwd=tmp_path)
        assert code == 0, out
        second = int(re.search(r"from clock (\d+) on all 2 shards", out).group(1))
        assert wait_for(lambda: worker_clock(run) >= second + 40, timeout=60)
        code, out = ctl(run, "show", cwd=tmp_path)
        shown = json.loads(out)
        assert [s["setting"]["mode"] for s in shown] == ["asp", "asp"]
    finally:
        stop(launcher, signal.SIGINT, timeout=30)

    events = read_events(run)
    changes = {}
    for e in events:
        if e["event"] == "setting_change":
            assert e["origin"] == "ctl"
            changes.setdefault(e["index"], []).append((e["effective_clock"], e["setting"]["mode"],
                                                       e["setting"]["bound"], e["setting"]["lr"]))
    # every shard switched at the same clocks to the same settings
    assert changes == {0: [(first, "ssp", 4, 0.1), (second, "asp", 4, 0.05)],
                       1: [(first, "ssp", 4, 0.1), (second, "asp", 4, 0.05)]}
    # summary.json (written on the stop too) keeps the start and says what the run became, change by change.
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["mode"], summary["staleness"]) == ("ssp", 0)
    assert summary["final_setting"] == {"mode": "asp", "staleness": 4, "lr": 0.05}
    assert [(c["clock"], c["key"], c["old"], c["new"], c["origin"]) for c in summary["setting_changes"]] == [
        (first, "consistency.staleness", 0, 4, "ctl"), (second, "consistency.mode", "ssp", "asp", "ctl"),
        (second, "optimizer.lr", 0.1, 0.05, "ctl")]
    # Each worker step's gap (its pull clock minus the slowest clock the shards
    # reported) stays within the bound in force at that clock, and the fast
    # workers do run into the wider bound.
    steps = [e for e in events if e["event"] == "step"]
    before = [e["gap"] for e in steps if e["clock"] < first]
    between = [e["gap"] for e in steps if first <= e["clock"] < second]
    after = [e["gap"] for e in steps if e["clock"] >= second]
    assert max(before) == 0 and max(between) == 4 and max(after) > 4
    finals = [e for e in events if e["event"] == "server_stats" and e["final"]]
    assert len(finals) == 2
    for f in finals:
        assert f["live"]["max_gap_over_bound"] == 0
        assert set(f["live"]["pulls_by_bound"]) == {"0", "4", "none"}
        assert f["counters"]["bad_requests_bad_token"] == 2


def raw_addresses(run):
    return [e["address"] for e in json.loads((run / "processes.json").read_text()) if e["role"] == "server"]


def raw_control(address, token):
    """One CONTROL request straight over a socket; returns (error code, clock)."""
    from psgd.wire import protocol as P
    from psgd.wire.transport import ShardConnections
    conns = ShardConnections([address])
    try:
        conns.send(0, P.encode(P.Control(req=1, op="prepare", token=token, settings={"consistency.staleness": 9})))
        for _ in range(100):
            got = conns.recv(timeout_ms=100)
            if got:
                rec, _ = P.decode(got[0][1])
                return (rec.code, None) if isinstance(rec, P.Error) else (None, rec.clock)
        raise AssertionError("no reply to CONTROL")
    finally:
        conns.close()


# A digits MLP whose forward pass on one worker rank sleeps during a range of
# its steps: a transient straggler, written beside the run's config as a plugin.
TRANSIENT_PLUGIN = '''
import sys, time
import torch.nn as nn

class TransientMLP(nn.Module):
    def __init__(self, rank, first, last, sleep_s, base_s):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        argv = sys.argv
        self.slow = "--rank" in argv and int(argv[argv.index("--rank") + 1]) == rank
        self.first, self.last, self.sleep_s, self.base_s, self.steps = first, last, sleep_s, base_s, 0

    def forward(self, x):
        if self.training:  # every worker's step takes base_s, so timing noise is small beside it
            time.sleep(self.base_s)
            if self.slow and self.first <= self.steps < self.last:
                time.sleep(self.sleep_s)
            self.steps += 1
        return self.net(x)

def transient_mlp(**kw):
    return TransientMLP(**kw)
'''

STEPS = 240
STALENESS_MAX = 6


def bound_at(changes, clock):
    """The bound in force at `clock` from one shard's setting_change events (start: 0)."""
    bound = 0
    for c in sorted(changes, key=lambda e: e["effective_clock"]):
        if c["effective_clock"] <= clock:
            bound = c["setting"]["bound"]
    return bound


@pytest.mark.timeout(180)
def test_auto_bound_follows_a_transient_straggler_and_always_holds(tmp_path):
    (tmp_path / "transient_plugin.py").write_text(TRANSIENT_PLUGIN)
    config = write_config(
        tmp_path / "config.yaml",
        cluster={"servers": 2, "workers": 3, "timeout_s": 10.0, "heartbeat_s": 0.5, "request_timeout_s": 10.0},
        consistency={"mode": "ssp", "staleness": "auto", "staleness_min": 0, "staleness_max": STALENESS_MAX},
        task={"model": "transient_plugin:transient_mlp", "dataset": "digits", "batch_size": 32,
              "model_args": {"rank": 2, "first": 60, "last": 120, "sleep_s": 0.05, "base_s": 0.005}},
        train={"steps_per_worker": STEPS, "max_time_s": 120, "target_accuracy": None},
        eval={"every_s": 1.0},
    )
    code, output, summary = launch(config, tmp_path / "run", timeout=150)
    assert code == 0, output
    events = read_events(tmp_path / "run")
    changes = {s: [e for e in events if e["event"] == "setting_change" and e["index"] == s] for s in (0, 1)}
    for s in (0, 1):
        assert all(c["origin"] == "auto" for c in changes[s])
        # the transient (steps 60-119 of rank 2, about 10x slower) widens the bound
        widened = [c for c in changes[s] if c["bound"] > c["previous"] and c["laggard"] == 2 and c["lag"] > 4
                   and 60 < c["decided_at_clock"] <= 120 + 16]
        assert widened, f"shard {s} did not widen for the straggler: {changes[s]}"
        assert all(0 <= c["bound"] <= STALENESS_MAX for c in changes[s])
    # Both shards decide the same, from the same step times, while every worker is
    # still in the quorum (the first to finish leaves at clock STEPS, when the
    # slowest is at least STEPS - STALENESS_MAX).
    agreed = lambda cs: [(c["decided_at_clock"], c["effective_clock"], c["bound"]) for c in cs  # noqa: E731
                         if c["decided_at_clock"] <= STEPS - STALENESS_MAX]
    assert agreed(changes[0]) == agreed(changes[1]) and agreed(changes[0])
    # Every answered pull kept within the bound in force at its clock: by the
    # shards' own record, and by the gaps the workers saw.
    finals = [e for e in events if e["event"] == "server_stats" and e["final"]]
    assert len(finals) == 2 and all(f["live"]["max_gap_over_bound"] <= 0 for f in finals)
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 3 * STEPS
    for e in steps:
        assert e["gap"] <= max(bound_at(changes[s], e["clock"]) for s in (0, 1)), e
    assert max(e["gap"] for e in steps) >= 1  # the wider bound was used
    assert summary["max_clock_gap"] <= STALENESS_MAX
