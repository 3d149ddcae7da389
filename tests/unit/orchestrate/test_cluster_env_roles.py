"""cluster_env.detect for Kubeflow's PyTorchJob and for roles named by the
environment (the torchx component)."""
import pytest

from psgd.runtime.cluster_env import ClusterEnvError, detect, with_config

PYTORCHJOB = {"MASTER_ADDR": "quick-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "7", "RANK": "3"}
TORCHX = {"PSGD_ROLE": "workers", "PSGD_ROLE_INDEX": "2", "PSGD_MASTER_ADDR_ENV": "TORCHX_RANK0_HOST",
          "TORCHX_RANK0_HOST": "localhost", "MASTER_PORT": "29511", "PSGD_JOB_ID": "psgd-q-7x"}


def test_pytorchjob_is_kubeflow_with_the_master_hosting_the_store():
    launch = detect(PYTORCHJOB)
    assert (launch.launcher, launch.rank, launch.world_size) == ("kubeflow", 3, 7)
    assert (launch.master_addr, launch.master_port, launch.agent_store) == ("quick-master-0", 23456, False)
    assert launch.job_id == "kubeflow.quick-master-0" and launch.role is None


def test_torchrun_keeps_its_name_when_local_rank_is_set():
    launch = detect({**PYTORCHJOB, "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "r1"})
    assert launch.launcher == "torchrun" and launch.job_id.startswith("r1.")


def test_the_role_comes_from_the_environment_and_the_rank_from_the_config():
    launch = detect(TORCHX)
    assert (launch.launcher, launch.role, launch.role_index) == ("torchx", "worker", 2)
    assert (launch.master_addr, launch.master_port, launch.job_id) == ("localhost", 29511, "torchx.psgd-q-7x")
    placed = with_config(launch, servers=2, workers=4, evaluator=True)
    assert (placed.rank, placed.world_size) == (4, 7)


def test_psgd_role_wins_over_rank_variables():
    assert detect({**TORCHX, "RANK": "0", "WORLD_SIZE": "7", "MASTER_ADDR": "h"}).role == "worker"


@pytest.mark.parametrize("env, words", [
    ({**TORCHX, "PSGD_ROLE_INDEX": "4"}, "PSGD_ROLE=worker PSGD_ROLE_INDEX=4, but the config has 4 workers"),
    ({k: v for k, v in TORCHX.items() if k != "MASTER_PORT"}, "set MASTER_ADDR .* and MASTER_PORT"),
    ({**TORCHX, "PSGD_ROLE": "driver"}, "PSGD_ROLE must be one of")])
def test_bad_role_environments_are_named(env, words):
    with pytest.raises(ClusterEnvError, match=words):
        with_config(detect(env), servers=2, workers=4, evaluator=True)
