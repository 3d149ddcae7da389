"""Launch details from torchrun's and SLURM's environment variables."""
import pytest

from psgd.runtime.cluster_env import ClusterEnvError, detect, expand_nodelist, reachable_address

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "7", "MASTER_ADDR": "node01", "MASTER_PORT": "29400",
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "job9",
            "TORCHELASTIC_RESTART_COUNT": "2"}


SLURM = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "123456",
         "SLURM_JOB_NODELIST": "gpu[07-09,12],login1", "SLURM_STEP_ID": "0"}


def test_torchrun_environment():
    env = detect(TORCHRUN)
    assert (env.launcher, env.rank, env.world_size) == ("torchrun", 3, 7)
    assert (env.master_addr, env.master_port, env.agent_store) == ("node01", 29400, True)
    assert env.job_id == "job9.2"  # a restarted attempt gets fresh store keys


def test_torchrun_without_agent_store_means_rank_zero_hosts_it():
    assert detect({**TORCHRUN, "TORCHELASTIC_USE_AGENT_STORE": "False"}).agent_store is False
    plain = {k: TORCHRUN[k] for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    assert detect(plain).agent_store is False


def test_slurm_environment_uses_first_node_and_job_port():
    env = detect(SLURM)
    assert (env.launcher, env.rank, env.world_size) == ("slurm", 5, 8)
    assert env.master_addr == "gpu07"
    assert env.master_port == 29500 + 123456 % 10000
    assert env.agent_store is False


def test_slurm_master_addr_and_port_can_be_exported():
    env = detect({**SLURM, "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "4000"})
    assert (env.master_addr, env.master_port) == ("10.1.2.3", 4000)


def test_torchrun_variables_win_inside_a_slurm_allocation():
    assert detect({**SLURM, **TORCHRUN}).launcher == "torchrun"


def test_nodelist_expansion():
    assert expand_nodelist("gpu[07-09,12],login1") == ["gpu07", "gpu08", "gpu09", "gpu12", "login1"]
    assert expand_nodelist("n1") == ["n1"]
    assert expand_nodelist("a[1-2],b[009-010]") == ["a1", "a2", "b009", "b010"]
    with pytest.raises(ClusterEnvError, match="range '5-2'"):
        expand_nodelist("x[5-2]")


@pytest.mark.parametrize("env, message", [
    ({}, "no cluster launcher found"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, "MASTER_ADDR is not"),
    ({**TORCHRUN, "RANK": "7"}, "rank 7 is outside world size 7"),
    ({**TORCHRUN, "WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer, got 'two'"),
    ({**TORCHRUN, "MASTER_PORT": "70000"}, "master port 70000"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "set MASTER_ADDR"),
])
def test_bad_environments_are_named(env, message):
    with pytest.raises(ClusterEnvError, match=message):
        detect(env)


def test_reachable_address_is_the_route_towards_the_store():
    env = detect({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"})
    assert reachable_address(env) == "127.0.0.1"
    override = detect({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400",
                       "PSGD_HOST": "127.0.0.2"})
    assert reachable_address(override) == "127.0.0.2"
