"""Kubeflow PyTorchJob and torchx role environments (no processes)."""
import pytest

from psgd.runtime.k8s_env import (
    EnvError,
    RoleFromEnv,
    is_kubeflow,
    kubeflow_job_id,
    role_from_env,
    role_rank,
    store_host,
)

PYTORCHJOB = {"MASTER_ADDR": "quick-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "7", "RANK": "3"}


def test_a_pytorchjob_pod_is_recognised_by_its_four_variables():
    assert is_kubeflow(PYTORCHJOB)
    assert kubeflow_job_id(PYTORCHJOB) == "kubeflow.quick-master-0"


@pytest.mark.parametrize("extra", [{"LOCAL_RANK": "0"}, {"TORCHELASTIC_RUN_ID": "x"}])
def test_torchrun_is_not_mistaken_for_kubeflow(extra):
    assert not is_kubeflow({**PYTORCHJOB, **extra})


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"])
def test_kubeflow_needs_all_four(missing):
    assert not is_kubeflow({k: v for k, v in PYTORCHJOB.items() if k != missing})


@pytest.mark.parametrize("name, index, role", [("server", "1", "server"), ("workers", "3", "worker"),
                                               ("Evaluator", "0", "evaluator")])
def test_role_and_index_come_from_the_environment(name, index, role):
    env = {"PSGD_ROLE": name, "PSGD_ROLE_INDEX": index, "PSGD_JOB_ID": "psgd-abc"}
    assert role_from_env(env) == RoleFromEnv(role, int(index), "psgd-abc")


def test_no_role_variable_means_no_role():
    assert role_from_env({"RANK": "0"}) is None


@pytest.mark.parametrize("env, words", [({"PSGD_ROLE": "ps"}, "PSGD_ROLE must be one of"),
                                        ({"PSGD_ROLE": "worker", "PSGD_ROLE_INDEX": "-1"}, "PSGD_ROLE_INDEX"),
                                        ({"PSGD_ROLE": "evaluator", "PSGD_ROLE_INDEX": "2"}, "one evaluator")])
def test_bad_role_variables_are_named(env, words):
    with pytest.raises(EnvError, match=words):
        role_from_env(env)


def test_store_host_from_master_addr_or_the_variable_torchx_names():
    assert store_host({"MASTER_ADDR": "h0"}) == "h0"
    assert store_host({"PSGD_MASTER_ADDR_ENV": "TORCHX_RANK0_HOST", "TORCHX_RANK0_HOST": "localhost"}) == "localhost"
    assert store_host({}) is None
    with pytest.raises(EnvError, match="VC_SERVERS_0_HOSTS, which is not set"):
        store_host({"PSGD_MASTER_ADDR_ENV": "VC_SERVERS_0_HOSTS"})


def test_role_ranks_put_servers_first_then_workers_then_the_evaluator():
    ranks = [role_rank("server", i, 2, 4) for i in range(2)] + [role_rank("worker", r, 2, 4) for r in range(4)]
    assert ranks + [role_rank("evaluator", 0, 2, 4)] == list(range(7))


def test_the_pytorchjob_manifest_starts_the_process_layout_quickstart_needs():
    import yaml
    from conftest import ROOT

    from psgd.config import load_config
    job = yaml.safe_load((ROOT / "configs" / "pytorchjob.yaml").read_text())
    cfg = load_config(ROOT / "configs" / "quickstart.yaml")
    specs = job["spec"]["pytorchReplicaSpecs"]
    world = specs["Master"]["replicas"] + specs["Worker"]["replicas"]
    assert specs["Master"]["replicas"] == 1  # rank 0: server 0, which hosts the store
    assert world == cfg.cluster.num_servers + cfg.cluster.workers + int(cfg.eval.enabled)
    container = specs["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["command"][:3] == ["psgd", "run", "/config/quickstart.yaml"]
    assert {"name": "pytorchjob-port", "containerPort": 23456} in container["ports"]
