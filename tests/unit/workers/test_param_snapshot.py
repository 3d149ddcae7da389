"""How the evaluator reads an all-reduce run's parameters: publish on request,
never a partial file, fall back to the latest snapshot when nobody answers."""
import threading
import time

import torch

from psgd.config import load_config
from psgd.workers.param_snapshot import REQUEST_FILE, SnapshotEvaluator, SnapshotPublisher, read_snapshot


def test_publisher_writes_only_when_asked_or_forced(tmp_path):
    pub = SnapshotPublisher(tmp_path)
    flat = torch.arange(5, dtype=torch.float32)
    assert not pub.maybe_publish(flat, 3) and read_snapshot(tmp_path) is None
    assert pub.maybe_publish(flat, 3, force=True)
    (tmp_path / REQUEST_FILE).touch()
    flat += 1
    assert pub.maybe_publish(flat, 4)
    assert not (tmp_path / REQUEST_FILE).exists()
    snap = read_snapshot(tmp_path)
    assert snap["updates"] == 4 and snap["seq"] == 2
    torch.testing.assert_close(snap["params"], torch.arange(1, 6, dtype=torch.float32), rtol=0, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allreduce_params.pt"]  # no temp file left


def test_evaluator_gets_fresh_parameters_from_rank_zero(tmp_path):
    cfg = load_config(None, ["consistency.mode=allreduce", "task.model=linear", "task.dataset=synthetic", "eval.every_s=5"])
    ev = SnapshotEvaluator(cfg, tmp_path)
    n = sum(p.numel() for p in ev.params)
    pub = SnapshotPublisher(tmp_path)
    pub.maybe_publish(torch.zeros(n), 0, force=True)
    stop = threading.Event()

    def rank0():  # answers requests the way the training loop does, once per "step"
        step = 0
        while not stop.is_set():
            step += 1
            pub.maybe_publish(torch.full((n,), 0.5), step)
            time.sleep(0.001)
    t = threading.Thread(target=rank0)
    t.start()
    try:
        result = ev.evaluate()
    finally:
        stop.set()
        t.join()
    assert result["updates"] >= 1 and result["versions"] == [result["updates"]]
    assert all(bool((p == 0.5).all()) for p in ev.params)


def test_evaluator_falls_back_to_the_latest_snapshot_when_training_has_ended(tmp_path):
    cfg = load_config(None, ["consistency.mode=allreduce", "task.model=linear", "task.dataset=synthetic", "eval.every_s=0.05"])
    ev = SnapshotEvaluator(cfg, tmp_path)
    n = sum(p.numel() for p in ev.params)
    SnapshotPublisher(tmp_path).maybe_publish(torch.full((n,), 0.25), 7, force=True)
    t0 = time.monotonic()
    result = ev.evaluate()  # nobody answers the request: waits eval.every_s, then uses what is there
    assert time.monotonic() - t0 >= 0.05 and result["updates"] == 7
    ev.close()
    assert not (tmp_path / REQUEST_FILE).exists()
