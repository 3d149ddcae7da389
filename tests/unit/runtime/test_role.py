"""What every process does on start: threads, events file, the common start signal."""
import json
import os
import threading

import torch

from psgd.config import load_config
from psgd.runtime.role import START_FILE, start_role


def test_start_role_sets_threads_and_opens_the_role_events_file(tmp_path):
    cfg = load_config(None, ["run.threads=1"])
    ctx = start_role("worker", 2, cfg, tmp_path, supervised=False)
    try:
        assert torch.get_num_threads() == 1
        ctx.events.emit("hello")
        assert (tmp_path / "events" / "worker-2.jsonl").exists()
        assert ctx.events.t0 is not None  # unsupervised: its own clock starts now
        assert not ctx.should_stop()
    finally:
        ctx.events.close()


def test_supervised_role_waits_for_the_launchers_start_file(tmp_path):
    ctx = start_role("server", 0, load_config(None), tmp_path, supervised=True)
    try:
        assert ctx.events.t0 is None
        assert ctx.poll_start() is False and ctx.events.t0 is None
        timer = threading.Timer(0.1, lambda: (tmp_path / START_FILE).write_text(json.dumps({"t0": 123.5})))
        timer.start()
        assert ctx.wait_for_start(poll_s=0.01)
        assert ctx.events.t0 == 123.5
    finally:
        ctx.events.close()


def test_a_stop_request_ends_the_wait_for_start(tmp_path):
    ctx = start_role("evaluator", 0, load_config(None), tmp_path, supervised=True)
    try:
        ctx.stop.set()
        assert ctx.wait_for_start(poll_s=0.01) is False
    finally:
        ctx.events.close()


def test_a_supervised_role_knows_when_its_launcher_is_gone(tmp_path):
    ctx = start_role("worker", 0, load_config(None), tmp_path, supervised=True)
    try:
        assert not ctx.orphaned()
        ctx.parent_pid = os.getppid() + 1_000_000  # as if our parent had changed (re-parented to init)
        assert ctx.orphaned() and ctx.should_stop()
    finally:
        ctx.events.close()


def test_a_stop_signal_that_lands_inside_stop_wait_does_not_deadlock(tmp_path):
    """A worker's straggler delay is ctx.stop.wait(); the launcher's SIGTERM at the end of
    the budget runs its handler on that same thread, possibly while wait() holds the
    Event's (non-reentrant) lock. Setting the Event there would block forever."""
    import signal
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    ctx = start_role("worker", 0, load_config(None), tmp_path, supervised=False)
    try:
        handler = signal.getsignal(signal.SIGTERM)
        with ctx.stop._cond:   # where the main thread is inside Event.wait (CPython's Event)
            handler(signal.SIGTERM, None)   # must return while the lock is held
            assert not ctx.stop.is_set()
        assert ctx.stop.wait(5.0)   # and the stop lands once the lock is free
    finally:
        ctx.events.close()
        for sig, h in previous.items():
            signal.signal(sig, h)


def test_a_role_restarted_into_a_started_run_writes_its_first_events_on_the_runs_clock(tmp_path):
    """A shard restarted mid-run emits `resumed` and `ready` before its serving loop
    polls for the start file: they carry the run's time, not 0."""
    import time
    t0 = time.time() - 100.0  # the run started 100 s ago
    (tmp_path / START_FILE).write_text(json.dumps({"t0": t0}))
    ctx = start_role("server", 1, load_config(None), tmp_path, supervised=True)
    try:
        assert ctx.events.t0 == t0
        ctx.events.emit("ready")
    finally:
        ctx.events.close()
    [ready] = [json.loads(line) for line in (tmp_path / "events" / "server-1.jsonl").read_text().splitlines()]
    assert ready["t"] >= 100.0
