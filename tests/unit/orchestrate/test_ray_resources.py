"""The Ray launcher's resource requests and placement (no Ray instance)."""
import pytest

from psgd.config import ConfigError, RayScheduling, load_config
from psgd.core.restarts import RestartBudget
from psgd.orchestrate.launchers import LaunchFailed
from psgd.orchestrate.ray.nodes import NodeLoss, cannot_restart
from psgd.orchestrate.ray.placement import (
    NodeView,
    RoleRequest,
    check_resources,
    nodes_that_fit,
    role_requests,
    spread_nodes,
)


def _cfg(*sets):
    return load_config(None, ["cluster.servers=2", "cluster.workers=3", *sets])


def test_every_process_requests_its_roles_resources():
    req = role_requests(_cfg("ray.worker.num_gpus=1", "ray.server.num_cpus=2", "ray.evaluator.num_cpus=0.5",
                             "ray.server.resources={node_a: 1}", "ray.worker.scheduling=default"))
    assert req[("server", 1)] == RoleRequest("server", 2.0, 0.0, {"node_a": 1.0}, RayScheduling.SPREAD)
    assert [req[("worker", r)] for r in range(3)] == [RoleRequest("worker", 1.0, 1.0, {}, RayScheduling.DEFAULT)] * 3
    assert req[("evaluator", 0)].num_cpus == 0.5 and len(req) == 6
    assert req[("server", 0)].options() == {"num_cpus": 2.0, "num_gpus": 0.0, "resources": {"node_a": 1.0},
                                            "scheduling_strategy": "SPREAD"}
    assert req[("worker", 0)].options()["scheduling_strategy"] == "DEFAULT"
    assert ("evaluator", 0) not in role_requests(_cfg("eval.enabled=false"))


def test_a_job_that_fits_passes():
    check_resources(role_requests(_cfg("ray.worker.num_gpus=1")), {"CPU": 6.0, "GPU": 3.0})
    check_resources(role_requests(_cfg("ray.worker.resources={node_b: 1}")), {"CPU": 6.0, "node_b": 3.0})


@pytest.mark.parametrize("available, words", [
    ({"CPU": 5.0, "GPU": 3.0}, "asks Ray for 6 CPU in all but the cluster has 5 CPU"),
    ({"CPU": 8.0, "GPU": 2.0}, "asks Ray for 3 GPU in all but the cluster has 2 GPU"),
    ({"CPU": 8.0}, "has 0 GPU")])
def test_a_job_that_cannot_fit_fails_naming_the_keys(available, words):
    with pytest.raises(LaunchFailed, match=words) as err:
        check_resources(role_requests(_cfg("ray.worker.num_gpus=1")), available)
    assert "ray.worker." in str(err.value) and "ray.server." in str(err.value)


def test_a_custom_resource_the_cluster_lacks_fails_naming_its_key():
    with pytest.raises(LaunchFailed, match=r"3 node_b in all but the cluster has 0 node_b "
                                           r"\(ray.worker.resources.node_b=1\)"):
        check_resources(role_requests(_cfg("ray.worker.resources={node_b: 1}")), {"CPU": 8.0, "node_a": 8.0})


def test_negative_requests_are_config_errors_naming_the_key():
    with pytest.raises(ConfigError, match="ray.worker.num_gpus"):
        _cfg("ray.worker.num_gpus=-1")


@pytest.mark.parametrize("setting, words", [
    ("ray.worker.resources={CPU: 1}", "ray.worker.resources.CPU: CPU is Ray's own resource: set num_cpus"),
    ("ray.server.resources={node_a: 0}", "ray.server.resources.node_a: must be > 0"),
    ("ray.server.resources={node_a: 1.5}", "ray.server.resources.node_a: above 1 must be a whole number"),
    ("ray.evaluator.resources=node_a", "ray.evaluator.resources: expected a mapping"),
    ("ray.worker.scheduling=pack", "ray.worker.scheduling: must be one of spread, default"),
])
def test_placement_mistakes_are_config_errors_naming_the_key(setting, words):
    with pytest.raises(ConfigError) as err:
        _cfg(setting)
    assert words in str(err.value)


A, B = NodeView("a", "10.0.0.1", {"CPU": 4.0, "node_a": 8.0}), NodeView("b", "10.0.0.2", {"CPU": 4.0, "node_b": 8.0})


def test_nodes_that_fit_count_what_the_job_holds_there():
    worker = RoleRequest("worker", 1.0, 0.0)
    assert nodes_that_fit(worker, [A, B], {"a": {"CPU": 3.5}}) == [B]
    assert nodes_that_fit(RoleRequest("worker", 1.0, 0.0, {"node_b": 1}), [A], {}) == []


def _requests(*sets):
    return role_requests(_cfg("ray.server.num_cpus=1", "ray.worker.num_cpus=1", "ray.evaluator.num_cpus=1", *sets))


def test_lost_workers_restart_where_there_is_room_else_the_reason_names_the_keys():
    cfg = _cfg("supervision.max_restarts=1")
    lost = NodeLoss("10.0.0.2", [("worker", 0), ("worker", 1)], "its node left the Ray cluster")
    kept = {("server", 0): "a", ("server", 1): "a"}
    assert lost.line() == "lost Ray node 10.0.0.2 (its node left the Ray cluster): worker 0, worker 1"
    assert cannot_restart(lost, _requests(), RestartBudget(cfg.supervision), [A], kept) is None
    # Two servers and two workers need 4 CPUs: a third would not fit.
    three = NodeLoss("10.0.0.2", [("worker", 0), ("worker", 1), ("worker", 2)], "gone")
    assert "no live Ray node has room for worker 2 (ray.worker.num_cpus=1)" in cannot_restart(
        three, _requests(), RestartBudget(cfg.supervision), [A], kept)
    pinned = cannot_restart(lost, _requests("ray.worker.resources={node_b: 1}"), RestartBudget(cfg.supervision),
                            [A], kept)
    assert "ray.worker.resources.node_b=1" in pinned
    spent = cannot_restart(lost, _requests(), RestartBudget(_cfg("supervision.max_restarts=0").supervision), [A], kept)
    assert "supervision.max_restarts=0" in spent
    server = cannot_restart(NodeLoss("10.0.0.2", [("server", 1)], "gone"), _requests(),
                            RestartBudget(cfg.supervision), [A], {})
    assert "server 1 cannot move to another node" in server


NODE_A = NodeView("id-a", "10.0.0.1", {"CPU": 4.0, "node_a": 8.0})
NODE_B = NodeView("id-b", "10.0.0.2", {"CPU": 4.0, "node_b": 8.0})


def test_spread_puts_each_roles_processes_on_the_nodes_in_turn():
    picks = spread_nodes(role_requests(_cfg("cluster.workers=4", "ray.server.num_cpus=0.5", "ray.worker.num_cpus=0.5",
                                            "ray.evaluator.num_cpus=0.5")), [NODE_B, NODE_A])  # in address order, whatever Ray lists
    assert picks == {("server", 0): "id-a", ("server", 1): "id-b", ("worker", 0): "id-a", ("worker", 1): "id-b",
                     ("worker", 2): "id-a", ("worker", 3): "id-b", ("evaluator", 0): "id-a"}


def test_spread_keeps_to_the_nodes_a_role_is_pinned_to_and_skips_full_ones():
    pinned = spread_nodes(role_requests(_cfg("ray.server.resources={node_a: 1}", "ray.worker.num_cpus=0.5")), [NODE_A, NODE_B])
    assert [pinned[("server", i)] for i in (0, 1)] == ["id-a", "id-a"]
    assert [pinned[("worker", r)] for r in range(3)] == ["id-a", "id-b", "id-a"]
    # One CPU a node: the servers take both, and no node can hold a worker: Ray decides (and waits).
    small = [NodeView("id-a", "10.0.0.1", {"CPU": 1.0}), NodeView("id-b", "10.0.0.2", {"CPU": 1.0})]
    full = spread_nodes(role_requests(_cfg("eval.enabled=false")), small)
    assert full == {("server", 0): "id-a", ("server", 1): "id-b"}


def test_roles_with_rays_default_scheduling_are_left_to_ray():
    picks = spread_nodes(role_requests(_cfg("ray.worker.scheduling=default")), [NODE_A, NODE_B])
    assert sorted(picks) == [("evaluator", 0), ("server", 0), ("server", 1)]
