"""psgd's layers hold: no module imports a layer above its own (the order is
written once, in tests/support/layers.py), and no import circle."""
from support.layers import LAYERS, circles, import_graph, layer_of, module_name, sources, upward_imports
from support.source_tree import text


def test_no_module_imports_a_layer_above_its_own():
    files = sources()
    assert len(files) > 100  # the package was found
    assert {layer_of(module_name(p)) for p in files} == {n for names in LAYERS for n in names} | {"psgd"}
    wrong = [line for p in files for line in upward_imports(text(p), module_name(p), p.name == "__init__.py")]
    assert wrong == []


def test_the_checker_catches_a_planted_upward_import_at_any_depth():
    planted = ("from psgd.config import Config\n"
               "def later():\n"
               "    from psgd.bench.procs import bench_config\n"
               "    return bench_config\n")
    assert upward_imports(planted, "psgd.sim.scale") == [
        "psgd.sim.scale:3 imports psgd.bench.procs.bench_config (sim may not import bench)"]
    assert upward_imports("from ..wire.protocol import ErrorCode\n", "psgd.core.live_settings") == [
        "psgd.core.live_settings:1 imports psgd.wire.protocol.ErrorCode (core may not import wire)"]
    assert upward_imports("import psgd.workers.client\n", "psgd.servers.shard") == [
        "psgd.servers.shard:1 imports psgd.workers.client (servers may not import workers)"]  # peers
    assert upward_imports("from psgd.config import Config\nimport torch\n", "psgd.core.x") == []


def test_no_import_circle():
    graph = import_graph()
    assert graph["psgd.orchestrate.job"] >= {"psgd.orchestrate.launchers", "psgd.orchestrate.preflight"}
    assert circles(graph) == []
    assert "psgd.config.loader" in graph["psgd.config.schema"]
    planted = {**graph, "psgd.config.loader": graph["psgd.config.loader"] | {"psgd.config.schema"}}
    assert [c for c in circles(planted) if {"psgd.config.loader", "psgd.config.schema"} <= set(c)]


