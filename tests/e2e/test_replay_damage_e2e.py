"""`psgd replay` on a damaged run directory: one line naming the file and the
damage, exit 2, no traceback, and never "matches" when there was nothing to match."""
import json
import shutil

import pytest
import torch
from conftest import ROOT, launch

from psgd.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay-damage")
    config = root / "quickstart.yaml"
    config.write_text((ROOT / "configs" / "quickstart.yaml").read_text())
    code, output, _ = launch(config, root / "run", "train.steps_per_worker=20", "train.target_accuracy=0.99",
                             "workers.device=cpu", "cluster.workers=2", timeout=100)
    assert code == 0, output
    return root / "run"


def _replay(run_dir, capsys):
    """`psgd replay RUN_DIR` in this process (the replay is one process; the run it reads was real)."""
    capsys.readouterr()
    code = main(["replay", str(run_dir)])
    out, err = capsys.readouterr()
    return code, out, err


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _reshape(path):
    saved = torch.load(path, weights_only=True)
    first = next(iter(saved))
    saved[first] = torch.zeros(3, 3)
    torch.save(saved, path)


def _strings_for_tensors(path):
    torch.save({name: "not a tensor" for name in torch.load(path, weights_only=True)}, path)


def _list_for_state_dict(path):
    torch.save([1, 2, 3], path)


def _garble_line(path):
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"t": 0.1, "role'
    path.write_bytes(b"\n".join(lines))


def _ff_byte(path):
    data = path.read_bytes()
    middle = len(data) // 2
    path.write_bytes(data[:middle] + b"\xff" + data[middle + 1:])


def _tear_last_line(path):
    path.write_bytes(path.read_bytes()[:-10])


def _array_line(path):
    path.write_bytes(path.read_bytes() + b"[1, 2]\n")


def _remove(path):
    path.unlink()


DAMAGES = [
    ("model.pt", _truncate, "cannot be loaded"),
    ("model.pt", _reshape, "of shape [3, 3]"),
    ("model.pt", _strings_for_tensors, "is a str, not a tensor"),
    ("model.pt", _list_for_state_dict, "holds a list, not a state_dict"),
    ("metrics.jsonl", _garble_line, "line 3 is not JSON"),
    ("metrics.jsonl", _ff_byte, "byte 0xff at offset"),
    ("metrics.jsonl", _tear_last_line, "the last line is torn"),
    ("metrics.jsonl", _array_line, "is a JSON list, not an event object"),
    ("metrics.jsonl", _remove, "is missing"),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name, damage, says", DAMAGES, ids=[f"{n}-{d.__name__[1:]}" for n, d, _ in DAMAGES])
def test_a_damaged_run_directory_is_one_line_naming_the_file_and_exit_2(recorded_run, tmp_path, capsys, name, damage, says):
    run_dir = tmp_path / "run"
    shutil.copytree(recorded_run, run_dir)
    damage(run_dir / name)
    code, out, err = _replay(run_dir, capsys)
    assert code == 2, (out, err)
    assert "Traceback" not in err and "matches" not in out, err
    (line,) = err.strip().splitlines()
    assert str(run_dir / name) in line and says in line, line


@pytest.mark.timeout(180)
def test_the_undamaged_copy_still_replays_identical(recorded_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(recorded_run, run_dir)
    code, out, err = _replay(run_dir, capsys)
    assert code == 0 and "bit-identical" in out, (out, err)


@pytest.mark.timeout(180)
def test_a_worker_step_missing_from_metrics_is_a_difference_not_a_match(recorded_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(recorded_run, run_dir)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    last_step = max(i for i, line in enumerate(lines) if '"event": "step"' in line and '"role": "worker"' in line)
    rank = json.loads(lines[last_step])["rank"]
    (run_dir / "metrics.jsonl").write_text("".join(lines[:last_step] + lines[last_step + 1:]))
    code, out, err = _replay(run_dir, capsys)
    assert code == 1, (out, err)
    assert f"worker {rank}: metrics.jsonl has 19 steps, the replay computed 20" in out, out
