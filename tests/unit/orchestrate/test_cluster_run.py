"""`psgd run` under cluster launchers: roles from the launcher's rank, server
addresses through TCPStore, an orderly end, and failures that end the job."""
import os
import re
from pathlib import Path

import pytest

from psgd.config import ConfigError, load_config
from psgd.orchestrate.cluster.run import Role, assign_role


def _cfg(*sets):
    return load_config(None, ["cluster.servers=2", "cluster.workers=3", *sets])


def test_first_ranks_serve_then_workers_then_the_evaluator():
    cfg = _cfg()
    roles = [assign_role(r, 6, cfg) for r in range(6)]
    assert roles == [Role("server", 0), Role("server", 1), Role("worker", 0), Role("worker", 1),
                     Role("worker", 2), Role("evaluator", 0)]
    no_eval = _cfg("eval.enabled=false")
    assert [assign_role(r, 5, no_eval).role for r in range(5)] == ["server"] * 2 + ["worker"] * 3


def test_world_size_must_match_the_config():
    with pytest.raises(ConfigError, match=r"cluster.workers: the launcher started 8 processes but this "
                                          r"config needs 6 \(2 servers \+ 3 workers \+ 1 evaluator\)"):
        assign_role(0, 8, _cfg())
    with pytest.raises(ConfigError, match="consistency.mode"):
        assign_role(0, 3, load_config(None, ["consistency.mode=allreduce", "cluster.workers=3"]))


def test_psgd_run_outside_a_launcher_is_a_clear_error(small_config, monkeypatch, capsys):
    from psgd.cli import main
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    assert main(["run", str(small_config())]) == 2
    assert "psgd run: no cluster launcher found" in capsys.readouterr().err


def _slurm_env(rank: int, world: int, port: int) -> dict:
    return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_JOB_ID": "77",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "", "WORLD_SIZE": ""}


def _without_torchrun_vars():
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}


def test_committed_cluster_files_agree():
    """configs/slurm.sbatch starts exactly as many tasks as configs/cluster.yaml needs."""
    root = Path(__file__).resolve().parents[3]
    cfg = load_config(root / "configs" / "cluster.yaml")
    ntasks = int(re.search(r"#SBATCH --ntasks=(\d+)", (root / "configs" / "slurm.sbatch").read_text()).group(1))
    roles = [assign_role(r, ntasks, cfg) for r in range(ntasks)]
    assert [r.role for r in roles].count("server") == 2 and roles[-1] == Role("evaluator", 0)
    assert load_config(root / "configs" / "multihost.yaml").cluster.num_servers == 2
