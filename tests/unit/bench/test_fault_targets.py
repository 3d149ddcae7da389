"""Which process `psgd bench faults` kills for a shard: with cluster.replicas, the one that
serves it now (named in checkpoints/shard-I.primary), never a backup, and only a pid the
run's processes.json lists."""
import json

from psgd.bench.faults import _pid
from psgd.config.modes import Role
from psgd.runtime.lifeline import PROCESSES_FILE, primary_file


def write_processes(run_dir, entries):
    (run_dir / PROCESSES_FILE).write_text(json.dumps(entries))


def test_a_replicated_shard_is_killed_where_it_is_served_now(tmp_path):
    write_processes(tmp_path, [{"role": "server", "index": 0, "pid": 100}, {"role": "server", "index": 1, "pid": 101},
                               {"role": "server", "index": 2, "pid": 102}, {"role": "server", "index": 3, "pid": 103},
                               {"role": "worker", "index": 0, "pid": 200}])
    assert _pid(tmp_path, Role.SERVER, 0) == 100  # no primary file: not replicated, the shard's own process
    primary_file(tmp_path, 0).parent.mkdir()
    primary_file(tmp_path, 0).write_text("102\n")  # process 2 took shard 0 over
    assert _pid(tmp_path, Role.SERVER, 0) == 102
    assert _pid(tmp_path, Role.WORKER, 0) == 200
    primary_file(tmp_path, 0).write_text("999\n")  # not one of the run's processes: nothing to kill
    assert _pid(tmp_path, Role.SERVER, 0) is None
