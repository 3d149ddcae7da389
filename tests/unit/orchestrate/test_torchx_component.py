"""The torchx component's AppDef (no scheduler)."""
import pytest
from conftest import ROOT
from torchx.specs import macros

from psgd.config import ConfigError
from psgd.orchestrate.cluster.torchx_component import psgd

QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _replica(role, replica_id):
    values = macros.Values(img_root="", app_id="psgd-x1", replica_id=str(replica_id), rank0_env="TORCHX_RANK0_HOST")
    return values.apply(role)


def test_one_torchx_role_per_psgd_role_with_the_configs_replica_counts():
    app = psgd(QUICKSTART, port=31000)
    assert [(r.name, r.num_replicas) for r in app.roles] == [("servers", 2), ("workers", 4), ("evaluator", 1)]
    assert all(r.entrypoint == "psgd" and r.args == ["run", QUICKSTART] for r in app.roles)
    env = _replica(app.roles[1], 3).env
    assert (env["PSGD_ROLE"], env["PSGD_ROLE_INDEX"], env["PSGD_JOB_ID"]) == ("worker", "3", "psgd-x1")
    assert (env["PSGD_MASTER_ADDR_ENV"], env["MASTER_PORT"]) == ("TORCHX_RANK0_HOST", "31000")
    assert app.roles[0].port_map == {"store": 31000}


def test_overrides_reach_every_replica_and_change_the_layout():
    app = psgd(QUICKSTART, overrides="cluster.workers=2, eval.enabled=false", run_dir="/shared/run", worker_gpu=1)
    assert [(r.name, r.num_replicas) for r in app.roles] == [("servers", 2), ("workers", 2)]
    assert app.roles[1].args == ["run", QUICKSTART, "--run-dir", "/shared/run", "--set", "cluster.workers=2",
                                 "--set", "eval.enabled=false"]
    assert (app.roles[0].resource.gpu, app.roles[1].resource.gpu) == (0, 1)


def test_a_bad_config_fails_before_scheduling_naming_the_key():
    with pytest.raises(ConfigError, match="cluster.workers"):
        psgd(QUICKSTART, overrides="cluster.workers=0")
    with pytest.raises(ValueError, match="consistency.mode"):
        psgd(QUICKSTART, overrides="consistency.mode=allreduce")
