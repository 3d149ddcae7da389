"""The launcher's scaling passes (psgd.orchestrate.elastic_launch) on stand-in processes:
a rank is live or leaving by its process, so a stopped worker whose `done` event was read
but whose process has not exited yet is neither stopped again nor started a second time;
and a resumed run starts with `min`, whatever an earlier launch was asked for."""
import json

from psgd.config import load_config
from psgd.config.modes import Role
from psgd.orchestrate.elastic import WORKERS_FILE
from psgd.orchestrate.states import ChildState
from psgd.orchestrate.supervisor import Supervisor
from psgd.runtime.event_names import Event

RANGE = "cluster.workers={min: 2, max: 5}"


class StandIn:
    """A worker process the test drives: its events, when it exits, what it was asked."""

    def __init__(self, index: int):
        self.role, self.index, self.address = Role.WORKER, index, None
        self.state = ChildState.STARTING
        self.code = None
        self.terminated = 0
        self.pending: list[dict] = []

    @property
    def name(self) -> str:
        return f"worker {self.index}"

    def poll(self):
        return self.code

    def read_events(self) -> list[dict]:
        out, self.pending = self.pending, []
        return out

    def cause(self) -> str:
        return "stand-in"

    def terminate(self) -> None:
        self.terminated += 1

    def says(self, event: str, clock: int = 0) -> None:
        self.pending.append({"t": 0.0, "role": "worker", "index": self.index, "rank": self.index,
                             "event": event, "clock": clock})


class Host:
    """Starts stand-ins and keeps every one it started."""
    FILLS_ROOM = False

    def __init__(self):
        self.started: list[StandIn] = []

    def start(self, cfg, role, index, address):
        self.started.append(StandIn(index))
        return self.started[-1]

    def describe(self, proc) -> dict:
        return {"role": proc.role, "index": proc.index, "pid": id(proc)}

    def refresh(self, procs) -> None:
        pass

    def losses(self, procs, budget, t):
        return []

    def worker_room(self, cfg):
        return None

    def release(self, proc) -> None:
        pass

    def silent(self, procs, after_s):
        return []


def _launcher(tmp_path):
    host = Host()
    launcher = Supervisor(load_config(None, [RANGE, "consistency.mode=ssp"]), tmp_path, processes=host)
    launcher.log.open(False)
    launcher._t0 = 0.0
    for rank in range(2):
        launcher._spawn(Role.WORKER, rank)
    return launcher, host


def _ready(launcher, host):
    for w in host.started:
        if w.state is ChildState.STARTING and w.code is None:
            w.says(Event.READY)
    launcher._poll(started=True)


def _ask(launcher, count: int, stamp: int) -> None:
    path = launcher.run_dir / WORKERS_FILE
    path.write_text(json.dumps({"workers": count}))
    import os
    os.utime(path, ns=(stamp, stamp))


def _alive(host) -> dict[int, int]:
    """rank -> processes of it that have not exited."""
    out: dict[int, int] = {}
    for w in host.started:
        if w.code is None:
            out[w.index] = out.get(w.index, 0) + 1
    return out


def test_a_stopped_worker_slow_to_exit_is_neither_stopped_again_nor_started_twice(tmp_path):
    launcher, host = _launcher(tmp_path)
    _ready(launcher, host)
    _ask(launcher, 5, 1)
    launcher._scale()
    _ready(launcher, host)
    assert sorted(_alive(host)) == [0, 1, 2, 3, 4]
    _ask(launcher, 2, 2)
    launcher._scale()
    leaving = [w for w in host.started if w.terminated]
    assert sorted(w.index for w in leaving) == [2, 3, 4]
    for w in leaving:  # each finishes its step and leaves the quorum; its process is still exiting
        w.says(Event.DONE, clock=7)
    launcher._poll(started=True)
    launcher._scale()  # a pass at the same target while they exit
    assert [w.terminated for w in leaving] == [1, 1, 1]
    _ask(launcher, 5, 3)
    for _ in range(3):  # scaling passes at the new target while they still exit
        launcher._scale()
        _ready(launcher, host)
        assert all(w.terminated == 1 for w in leaving)
        assert max(_alive(host).values()) == 1, _alive(host)  # one incarnation per rank
    for w in leaving:
        w.code = 0
    launcher._poll(started=True)
    launcher._scale()
    _ready(launcher, host)
    assert _alive(host) == {r: 1 for r in range(5)}
    assert len(host.started) == 8  # 2 first, 3 joined, the same 3 ranks again once theirs had exited
    left = [e for e in launcher.events if e.get("event") == Event.MEMBERSHIP and e["change"] == "left"]
    assert sorted(e["rank"] for e in left) == [2, 3, 4] and all(e["cause"] == "scaled_down" for e in left)


def test_a_resumed_run_starts_with_min_whatever_an_earlier_launch_was_asked(tmp_path):
    (tmp_path / WORKERS_FILE).write_text(json.dumps({"workers": 3}))  # asked of the launch that stopped
    launcher, host = _launcher(tmp_path)
    _ready(launcher, host)
    launcher._scale()
    assert sorted(_alive(host)) == [0, 1]
    _ask(launcher, 4, 10**18)  # asked of this launch: taken
    launcher._scale()
    assert sorted(_alive(host)) == [0, 1, 2, 3]
