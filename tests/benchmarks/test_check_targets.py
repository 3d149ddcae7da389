"""benchmarks/check_targets.py: the project's own targets, read from the
results.json that `psgd bench comm` and `psgd bench apply` write."""
import json

from conftest import load_script

from psgd.bench.comm import comm_row, cross_host_row

targets = load_script("benchmarks/check_targets.py")
MS = 1e-3


def _row(size, psgd, floor=1.0, shm=1.0, rpc=4.0, ray=5.0):
    return comm_row(size, 1, psgd=[psgd * MS], raw=[0.5 * MS], gloo=[2 * MS], rpc=[rpc * MS], raw_sgd=[floor * MS],
                    more={"psgd_tcp": [2 * psgd * MS], "shm_floor": [shm * MS], "shm_zmq_floor": [1.25 * MS],
                          "shm_floor_inproc": [0.5 * MS], "ray": [ray * MS] if ray else []})


def test_comm_checks_follow_the_project_targets():
    rows = [_row(64 << 10, psgd=1.2, floor=1.0), _row(1 << 20, psgd=1.0, shm=0.9, rpc=2.5, ray=None),
            comm_row(10 << 20, 1, [1.4 * MS], [1 * MS], [1 * MS], [4 * MS], [1 * MS],
                     more={"psgd_tcp": [1.3 * MS], "shm_floor_inproc": [1.0 * MS]})]
    cross = [cross_host_row(10 << 20, {"psgd": [1.2 * MS], "raw_sgd": [1.0 * MS], "shared_memory": False})]
    got = {c.label: c.passed for c in targets.comm_checks(rows, cross)}
    assert got == {
        "64 KB, one host: default path <= 1.05 x psgd TCP": True,
        "64 KB, one host: psgd <= 1.3 x raw ZeroMQ check+SGD floor": True,
        "1 MB, one host: default path <= 1.05 x psgd TCP": True,
        "1 MB, one host: psgd <= 2.0 x in-process shared-memory floor": True,
        "10 MB, one host: default path <= 1.05 x psgd TCP": False,
        "10 MB, one host: psgd <= 1.3 x in-process shared-memory floor": False,
        "10 MB, one host: psgd <= 0.5 x torch.rpc PS": True,
        "10 MB, one host: psgd <= 0.5 x Ray actor PS": None,
        "10 MB, one host: psgd <= 1.2 x shared-memory floor (two processes)": None,
        "1 MB, one host: psgd <= 0.5 x torch.rpc PS": True,
        "1 MB, one host: psgd <= 0.5 x Ray actor PS": None,
        "1 MB, one host: psgd <= 1.2 x shared-memory floor (two processes)": True,
        "10 MB, across namespaces: psgd <= 1.15 x raw ZeroMQ check+SGD floor": False,
    }


def test_floor_notes_are_computed_from_the_row():
    row = comm_row(1 << 20, 1, psgd=[0.0009], raw=[0.0004], gloo=[0.002], rpc=[0.0015], raw_sgd=[0.0006])
    (line,) = targets.floor_notes([row, {**row, "shards": 2}])
    assert "from 0.400 to 0.600 ms (1.50 x raw ZeroMQ; a 1.25 x target would allow 0.500 ms)" in line
    assert "psgd adds +0.300 ms to the floor (1.50 x)" in line
    assert "need psgd at 0.500 ms, 1.25 x the raw echo" in line


def test_main_reads_results_json_and_fails_on_a_missed_target(tmp_path, capsys):
    comm = tmp_path / "comm.json"
    comm.write_text(json.dumps({"rows": [_row(64 << 10, psgd=1.2)], "cross_host": []}))
    apply = tmp_path / "apply.json"
    apply.write_text(json.dumps({"rows": [{"optimizer": "sgd", "size_bytes": 1 << 20, "gb_per_s": 0.8},
                                          {"optimizer": "adam", "size_bytes": 1 << 20, "gb_per_s": 0.1}]}))
    assert targets.main([str(comm)]) == 0
    assert "PASS  64 KB, one host: psgd <= 1.3 x raw ZeroMQ check+SGD floor  (1.200 x)" in capsys.readouterr().out
    assert targets.main([str(comm), str(apply)]) == 1
    assert "FAIL  sgd applies >= 1.0 GB/s at every size  (slowest size 0.80 GB/s)" in capsys.readouterr().out
    scale = tmp_path / "scale.json"
    scale.write_text(json.dumps({"rows": [{"shards": 1, "workers": 4}]}))
    assert targets.main([str(scale)]) == 2
