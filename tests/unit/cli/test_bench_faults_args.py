"""`psgd bench faults` refuses a storm it cannot run in one line, before starting any launch."""
import json

import pytest

from psgd.cli import main

CONFIG = "cluster: {servers: 2, workers: 4}\nconsistency: {mode: asp}\ntrain: {max_time_s: 120}\n"


@pytest.mark.parametrize("args, message", [
    (["--kill-every-s", "0"], "--kill-every-s must be > 0, got 0.0"),
    (["--set", "consistency.mode=allreduce"], "all-reduce ranks cannot rejoin"),
    (["--set", "train.max_time_s=5"], "no kill fits in train.max_time_s=5"),
    (["--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["--set", "cluster.wokers=2"], "cluster.wokers"),
    (["--against", "x.json"], "--against compares a simulated storm with a real one: give --on sim"),
    (["--on", "sim", "--against", "missing.json"], "--against missing.json: not a readable faults.json"),
    (["--on", "sim", "--against", "{real}", "--kill-every-s", "20"],
     "the real bench's kill_every_s is 10.0, this one's 20.0: not the same storm"),
    (["--on", "sim", "--against", "{simulated}"], "that bench ran on sim, not on real processes"),
])
def test_bad_storms_fail_in_one_line_and_start_nothing(tmp_path, capsys, args, message):
    out, cfg = tmp_path / "bench", tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    storm = {"target": "workers", "kill_every_s": 10.0, "max_time_s": 120.0, "mode": "asp", "workers": 4, "shards": 2,
             "analysis": {}}
    for name, on in (("real", "local"), ("simulated", "sim")):
        (tmp_path / f"{name}.json").write_text(json.dumps({**storm, "on": on}))
    args = [a.format(real=tmp_path / "real.json", simulated=tmp_path / "simulated.json") for a in args]
    assert main(["bench", "faults", str(cfg), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psgd bench faults: ") and message in err and "\n" not in err
    assert not out.exists()


def test_a_bench_directory_holding_runs_is_refused(tmp_path, capsys):
    (tmp_path / "bench" / "runs").mkdir(parents=True)
    (tmp_path / "c.yaml").write_text(CONFIG)
    assert main(["bench", "faults", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "bench")]) == 2
    assert "already holds a bench's runs" in capsys.readouterr().err
