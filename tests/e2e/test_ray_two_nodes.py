"""`psgd launch --on ray` on a two-node Ray cluster made of two network
namespaces (tests/support/ray_cluster.py): node A (the head, `node_a`) shares
the filesystem with the launcher; node B (`node_b`) has its own /tmp and
/dev/shm, so what its roles write comes back only through Ray."""
import json
import subprocess
import sys

import pytest
from support.ray_cluster import SetupFailed, TwoNodeRay, leftovers, unsupported

pytestmark = pytest.mark.e2e


def _cluster():
    reason = unsupported()
    if reason is not None:
        pytest.skip(reason)
    cluster = TwoNodeRay()
    try:
        cluster.start()
    except SetupFailed as exc:
        if "netns add" in str(exc):  # this machine cannot make namespaces: not a psgd failure
            pytest.skip(f"cannot create network namespaces here: {exc}")
        raise
    return cluster


def _teardown(cluster: TwoNodeRay) -> None:
    left = cluster.close() + leftovers(cluster.token)
    assert left == [], f"left behind: {left}"


@pytest.fixture(scope="module")
def two_nodes():
    """One cluster for the tests that leave both nodes standing."""
    cluster = _cluster()
    try:
        yield cluster
    finally:
        _teardown(cluster)


@pytest.fixture
def fresh_two_nodes():
    """A cluster of its own, for a test that kills a node."""
    cluster = _cluster()
    try:
        yield cluster
    finally:
        _teardown(cluster)


NODES = """
import json, ray
ray.init(address=%r, include_dashboard=False, log_to_driver=False, configure_logging=False)
@ray.remote(num_cpus=0.1)
def where():
    import tempfile, os
    return ray.util.get_node_ip_address(), sorted(os.listdir(tempfile.gettempdir()))
print(json.dumps({"resources": ray.cluster_resources(),
                  "a": ray.get(where.options(resources={"node_a": 1}).remote()),
                  "b": ray.get(where.options(resources={"node_b": 1}).remote())}))
"""


@pytest.mark.timeout(90)
def test_the_two_nodes_are_two_hosts_to_ray(two_nodes):
    res = subprocess.run(two_nodes.on_a([sys.executable, "-c", NODES % two_nodes.address]),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen["resources"]["node_a"] == 8 and seen["resources"]["node_b"] == 8
    assert f"node:{two_nodes.ip_a}" in seen["resources"] and f"node:{two_nodes.ip_b}" in seen["resources"]
    assert seen["a"][0] == two_nodes.ip_a and seen["b"][0] == two_nodes.ip_b
    assert seen["b"][1] == ["psgd-rt"]  # node B's /tmp is its own: only its Ray session is there
