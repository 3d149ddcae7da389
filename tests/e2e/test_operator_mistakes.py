"""Operators' mistakes, with real processes: a second launcher on a run directory in
use, a --resume (or a hand-resumed shard) after changing the optimizer or the
model's width, and a disk too full for the start."""
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import (
    finish,
    one_clear_line,
    psgd_cmd,
    run_psgd,
    spawn,
    start_launch,
    stop,
    tmpfs,
    wait_for,
    worker_steps,
    write_config,
)

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_a_second_launcher_on_a_run_directory_in_use_is_refused_naming_the_first(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", train={"steps_per_worker": 100000, "max_time_s": 40},
                       eval={"enabled": False}, workers={"device_ms": 20})  # runs until stopped: few cores used
    out = tmp_path / "run"
    first = start_launch(cfg, out)
    try:
        assert wait_for(lambda: worker_steps(out, 0) >= 20, timeout=60), "the first run never got going"
        token = (out / "run.token").read_text()
        processes = (out / "processes.json").read_text()
        code, stdout, stderr = run_psgd("launch", str(cfg), "--out", str(out), "--quiet", cwd=tmp_path, timeout=60)
        line = one_clear_line(stdout + stderr)
        assert code == 1 and f"pid {first.pid} on " in line and "in use by another psgd launcher" in line, line
        # Nothing of the first run was touched: its token, its processes, its training.
        assert (out / "run.token").read_text() == token and (out / "processes.json").read_text() == processes
        steps = worker_steps(out, 0)
        assert wait_for(lambda: worker_steps(out, 0) > steps + 20, timeout=30)
        code, stdout, stderr = run_psgd("launch", "--resume", str(out), "--quiet", cwd=tmp_path, timeout=60)
        assert code == 1 and "in use by another psgd launcher" in stdout + stderr
    finally:
        stop(first, timeout=30)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One finished short run with optimizer state (momentum) and a stated model width, shared:
    each test changes its own copy's config (a run directory holds no absolute path)."""
    base = tmp_path_factory.mktemp("finished")
    cfg = write_config(base / "c.yaml", train={"steps_per_worker": 20, "max_time_s": 60},
                       optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.9},
                       task={"model_args": {"hidden": 32}}, eval={"enabled": False})
    code, output = finish(start_launch(cfg, base / "run"), 90)
    assert code == 0, output
    return base / "run"


def _copy_with(finished_run, tmp_path, change):
    out = Path(shutil.copytree(finished_run, tmp_path / "run", symlinks=True))
    run_cfg = yaml.safe_load((out / "config.yaml").read_text())
    change(run_cfg)
    (out / "config.yaml").write_text(yaml.safe_dump(run_cfg))
    return out


@pytest.mark.timeout(120)
def test_resume_after_changing_the_optimizer_is_refused_before_anything_starts(tmp_path, finished_run):
    out = _copy_with(finished_run, tmp_path, lambda c: c["optimizer"].update(name="adam"))
    before = {p: p.stat().st_size for p in out.rglob("*") if p.is_file()}
    code, stdout, stderr = run_psgd("launch", "--resume", str(out), "--quiet", cwd=tmp_path, timeout=60)
    line = one_clear_line(stdout + stderr)
    assert code == 1 and "cannot resume" in line and "optimizer state was ['momentum_buffer']" in line, line
    assert "logs" not in line  # refused up front, not after restarts: no process wrote a byte
    assert {p: p.stat().st_size for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.timeout(120)
def test_resume_after_changing_the_model_width_is_refused_naming_the_key(tmp_path, finished_run):
    out = _copy_with(finished_run, tmp_path, lambda c: c["task"]["model_args"].update(hidden=48))
    before = {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()}
    code, stdout, stderr = run_psgd("launch", "--resume", str(out), "--quiet", cwd=tmp_path, timeout=60)
    line = one_clear_line(stdout + stderr)
    assert code == 1 and "cannot resume" in line and "task.model_args.hidden was 32, is 48" in line, line
    # No shard started: its first act would be a fresh snapshot.
    assert {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()} == before


@pytest.mark.timeout(90)
def test_a_hand_resumed_server_with_another_optimizer_stops_in_one_line(tmp_path):
    from psgd.runtime.ports import free_ports
    from psgd.runtime.role import EXIT_NO_RETRY
    servers = {"servers": [f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}"], "workers": 1}
    adam = write_config(tmp_path / "adam.yaml", cluster=servers, optimizer={"name": "adam", "lr": 0.01})
    sgd = write_config(tmp_path / "sgd.yaml", cluster=servers, optimizer={"name": "sgd", "lr": 0.1})
    out = tmp_path / "run"
    first = spawn(psgd_cmd("server", str(adam), "--shard", "0", "--run-dir", str(out)), cwd=str(tmp_path))
    try:
        assert wait_for(lambda: (out / "checkpoints" / "shard-0.pt").exists(), timeout=60)
    finally:
        stop(first, timeout=20)
    code, stdout, stderr = run_psgd("server", str(sgd), "--shard", "0", "--run-dir", str(out), cwd=tmp_path,
                                    timeout=60)
    line = one_clear_line(stdout + stderr)
    assert code == EXIT_NO_RETRY and line.startswith("psgd server: shard 0: the checkpoint holds adam state "
                                                     "(exp_avg, exp_avg_sq), the config's optimizer is sgd"), line


@pytest.mark.timeout(60)
def test_a_disk_too_full_for_the_start_is_one_line_naming_the_file(tmp_path):
    cfg = write_config(tmp_path / "c.yaml")  # the digits task cache alone is about 0.5 MB
    with tmpfs(tmp_path / "tiny", "128k") as disk:
        code, stdout, stderr = run_psgd("launch", str(cfg), "--out", str(disk / "run"), "--quiet", cwd=tmp_path,
                                        timeout=50)
        line = one_clear_line(stdout + stderr)
        assert code == 1 and "No space left on device" in line and str(disk / "run") in line, line
        assert json.dumps(line)  # one printable line, no traceback
