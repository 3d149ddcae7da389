"""Elastic workers' rule without processes: the range in the config (parsed, written back
into a run's config.yaml, refused where a mode cannot run it, each in one line naming the
key), the launcher's target and which ranks it starts or stops, `psgd ctl RUN_DIR workers N`,
and the membership changes summary.json lists."""
import json

import pytest

from psgd.cli import main
from psgd.config import ConfigError, dump_config, load_config
from psgd.config.elastic import WorkerRange
from psgd.orchestrate.elastic import WORKERS_FILE, ElasticPlan, read_request
from psgd.orchestrate.records.summary import summarize
from psgd.runtime.lifeline import PROCESSES_FILE

RANGE = "cluster.workers={min: 2, max: 6}"


def test_a_range_sets_the_rank_count_and_round_trips_through_the_run_config(tmp_path):
    cfg = load_config(None, [RANGE])
    assert cfg.cluster.workers == 6 and cfg.cluster.worker_range == WorkerRange(2, 6)
    assert cfg.cluster.starting_workers == 2
    (tmp_path / "config.yaml").write_text(dump_config(cfg))
    again = load_config(tmp_path / "config.yaml")
    assert again.cluster == cfg.cluster
    plain = load_config(cfg, ["cluster.workers=3"])       # a plain count replaces the range
    assert plain.cluster.worker_range is None and plain.cluster.starting_workers == 3
    assert load_config(None, ["cluster.workers=4"]).cluster.worker_range is None


@pytest.mark.parametrize("sets, key", [
    (["cluster.workers={min: 0, max: 6}"], "cluster.workers.min"),
    (["cluster.workers={min: 3, max: 2}"], "cluster.workers.max"),
    (["cluster.workers={min: 2}"], "cluster.workers.max"),
    (["cluster.workers={min: 2, max: 2000000}"], "cluster.workers.max"),
    (["cluster.workers={min: 2, max: 6, start: 3}"], "cluster.workers.start"),
    ([RANGE, "consistency.mode=allreduce"], "cluster.workers"),
    ([RANGE, "cluster.launcher=sim"], "cluster.workers"),
    ([RANGE, "consistency.mode=bsp", "consistency.backup_workers=2"], "consistency.backup_workers"),
    ([RANGE, "consistency.mode=bsp", "optimizer.lr_scaling=linear"], "optimizer.lr_scaling"),
    ([RANGE, "consistency.mode=ssp", "local.steps=4"], "cluster.workers"),
])
def test_a_range_that_cannot_run_is_refused_in_one_line_naming_the_key(sets, key):
    with pytest.raises(ConfigError) as info:
        load_config(None, sets)
    assert info.value.key == key and "\n" not in str(info.value)


def test_bsp_local_updates_take_a_range():
    assert load_config(None, [RANGE, "consistency.mode=bsp", "local.steps=4"]).cluster.worker_range.max == 6


def test_the_target_starts_at_min_follows_requests_within_the_range_and_drops_with_losses():
    plan = ElasticPlan(WorkerRange(2, 6))
    assert plan.plan([0, 1], room=None, ending=False).start == []
    assert plan.take_request((1, 5)) and plan.target == 5
    assert not plan.take_request((1, 5))                  # the same request twice is taken once
    assert plan.plan([0, 1], room=None, ending=False).start == [2, 3, 4]  # the lowest free ranks
    assert plan.plan([0, 1], room=None, ending=True).start == []          # the run is ending
    assert plan.plan([0, 1, 4], room=3, ending=False).start == []         # the host has room for 3
    assert plan.take_request((2, 99)) and plan.target == 6                # a hand-written file: clamped
    assert plan.take_request((3, 3)) and plan.plan([0, 1, 2, 3, 5], None, False).stop == [3, 5]  # newest go
    assert plan.lost(running=2) and plan.target == 2      # two left: the run goes on with them
    assert not plan.lost(running=1)                       # below min: replace it


def test_a_host_that_fills_its_room_starts_at_max_and_follows_the_room():
    plan = ElasticPlan(WorkerRange(2, 6), follows_room=True)
    assert plan.plan([0, 1], room=4, ending=False).start == [2, 3]        # a node with room for two more
    assert plan.plan([0, 1, 2, 3], room=1, ending=False).stop == [2, 3]   # never below min
    assert plan.lost(running=2) and plan.target == 6  # its node may come back: the room decides
    assert plan.plan([0, 1], room=4, ending=False).start == [2, 3]


def _ctl(run_dir, *words):
    return main(["ctl", str(run_dir), "workers", *words])


def _live(run_dir):
    """What a launcher keeps while the run is live (and removes when it ends)."""
    (run_dir / PROCESSES_FILE).write_text(json.dumps([{"role": "worker", "index": 0, "pid": 1}]))


def test_psgd_ctl_workers_asks_the_launcher_within_the_range(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(dump_config(load_config(None, [RANGE])))
    _live(tmp_path)
    assert _ctl(tmp_path, "4") == 0
    assert read_request(tmp_path / WORKERS_FILE)[1] == 4
    assert _ctl(tmp_path, "7") == 1 and "outside cluster.workers [2, 6]" in capsys.readouterr().err
    assert _ctl(tmp_path, "x") == 2
    assert read_request(tmp_path / WORKERS_FILE)[1] == 4  # a refused request changes nothing
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / "config.yaml").write_text(dump_config(load_config(None, ["cluster.workers=4"])))
    _live(fixed)
    assert _ctl(fixed, "4") == 1 and "fixed count" in capsys.readouterr().err
    assert not (fixed / WORKERS_FILE).exists()


def test_psgd_ctl_workers_on_a_finished_run_asks_whether_it_is_live(tmp_path, capsys):
    """Like `show`: no launcher acts on a run that has ended, so nothing is asked of it."""
    (tmp_path / "config.yaml").write_text(dump_config(load_config(None, [RANGE])))
    assert _ctl(tmp_path, "3") == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / PROCESSES_FILE} not found: is the run still live?" in err and "launcher" not in err
    assert not (tmp_path / WORKERS_FILE).exists()


def test_a_request_file_that_is_not_one_is_ignored(tmp_path):
    path = tmp_path / WORKERS_FILE
    assert read_request(path) is None
    for text in ("{", "[]", json.dumps({"workers": "5"}), json.dumps({"workers": True})):
        path.write_text(text)
        assert read_request(path) is None


def test_the_summary_lists_the_membership_changes_in_order():
    cfg = load_config(None, [RANGE])
    events = [{"t": 1.0, "role": "launcher", "index": 0, "event": "membership", "rank": 2, "change": "joined",
               "clock": 30, "cause": "scaled_up"},
              {"t": 2.0, "role": "launcher", "index": 0, "event": "membership", "rank": 1, "change": "left",
               "clock": 41, "cause": "lost"}]
    summary = summarize(cfg, events, 3.0)
    assert summary["worker_range"] == {"min": 2, "max": 6}
    assert summary["membership_changes"] == [{k: e[k] for k in ("t", "rank", "change", "clock", "cause")}
                                             for e in events]
    fixed = summarize(load_config(None, []), [], 1.0)
    assert fixed["worker_range"] is None and fixed["membership_changes"] == []


def test_launchers_with_a_fixed_task_count_refuse_a_range(monkeypatch):
    from psgd.orchestrate.cluster.run import assign_role
    from psgd.orchestrate.records.collect import expected_processes
    from psgd.workers.optimizer import rank_from_env
    cfg = load_config(None, [RANGE])
    with pytest.raises(ConfigError) as info:
        assign_role(0, 9, cfg)
    assert info.value.key == "cluster.workers" and "fixed number of tasks" in str(info.value)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(ConfigError) as info:
        rank_from_env(cfg)
    assert info.value.key == "cluster.workers"
    # The processes a run certainly has: a range's ranks above min may never have run.
    assert [n for n in expected_processes(cfg) if n.startswith("worker")] == ["worker-0", "worker-1"]


def test_on_ray_a_range_asks_for_min_workers_up_front_and_grows_to_the_nodes_room():
    from psgd.orchestrate.ray.nodes import NodeLoss, loss_event
    from psgd.orchestrate.ray.placement import NodeView, role_request, role_requests, room_for
    cfg = load_config(None, [RANGE, "ray.worker.num_cpus=1", "ray.server.num_cpus=1", "eval.enabled=false"])
    assert sorted(role_requests(cfg)) == [("server", 0), ("server", 1), ("worker", 0), ("worker", 1)]
    worker = role_request(cfg, "worker")
    a, b = NodeView("a", "10.0.0.1", {"CPU": 4.0}), NodeView("b", "10.0.0.2", {"CPU": 2.5})
    held = {"a": {"CPU": 4.0}}                        # two shards and two workers fill node A
    assert room_for(worker, [a], held) == 0
    assert room_for(worker, [a, b], held) == 2        # node B joins: room for two more (2.5 CPUs)
    assert room_for(role_request(load_config(None, ["ray.worker.num_cpus=0"]), "worker"), [a], {}) is None
    loss = NodeLoss("10.0.0.2", [("worker", 2), ("worker", 3)], "its node left the Ray cluster")
    event = loss_event(loss, None, 1.0, let_go=loss.roles)
    assert event["line"] == ("lost Ray node 10.0.0.2 (its node left the Ray cluster): worker 2, worker 3; "
                             "the run goes on without worker 2, worker 3 (cluster.workers is a range)")
    assert loss_event(loss, None, 1.0)["line"].endswith("; restarting them on the other nodes")
