"""Record and replay: real asynchronous runs (real processes and sockets) re-executed
in one process by `psgd replay` reproduce their final parameters bit for bit."""
import contextlib
import io
import json
import math
import shutil
from pathlib import Path

import msgpack
import pytest
import torch
from conftest import ROOT, launch

from psgd.cli import main
from psgd.config import load_config
from psgd.core.sharding import make_layout
from psgd.wire.codecs.runs import push_plans
from psgd.wire.codecs.topk import topk_count
from psgd.wire.payload import wire_nbytes
from psgd.wire.replies import reply_nbytes

pytestmark = pytest.mark.e2e

BY_TENSOR = "{default: int8, small: none, choose_by: tensor}"
# On 3 shards the MLP's are 1604, 1604 and 1602 values: the last is below small_below, so pushed as fp32.
PER_SHARD = "{default: int8, small: none, small_below: 1603}"
STEPS = 30  # per worker: pushes at several stalenesses, and DiLoCo's last, shorter round (30 = 3 * 8 + 6)
# Two asynchronous workers interleave their pushes as four do (stalenesses 0 to 3 or 4 in three 30-step
# runs), at about 0.4 s less CPU a launch than the quickstart's four; this file launches 13 runs.
WORKERS = 2
SHORT = [f"train.steps_per_worker={STEPS}", "train.target_accuracy=0.99", "workers.device=cpu",
         f"cluster.workers={WORKERS}"]


def _config(tmp_path):
    config = tmp_path / "quickstart.yaml"
    config.write_text((ROOT / "configs" / "quickstart.yaml").read_text())
    return config


@pytest.fixture(scope="module")
def asp_run(tmp_path_factory):
    """One real ASP run of the short quickstart, shared: a test that alters it works on its own copy."""
    base = tmp_path_factory.mktemp("asp")
    code, output, summary = launch(_config(base), base / "run", *SHORT, "consistency.mode=asp", timeout=100)
    assert code == 0, output
    return base / "run", summary


def _copy(run, tmp_path):
    return Path(shutil.copytree(run, tmp_path / "run"))


def _replay(run_dir, *extra):
    """`psgd replay --json` in this process (a replay is one process; the run it reads was real)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["replay", str(run_dir), "--json", *extra])
    out, err = out.getvalue(), err.getvalue()
    return code, (json.loads(out) if out.strip().startswith("{") else {}), err


@pytest.mark.timeout(200)  # the first to ask for asp_run waits for its launch
@pytest.mark.parametrize("overrides", [
    ["consistency.mode=asp"],
    ["consistency.mode=ssp", "consistency.staleness=2"],
    ["consistency.mode=asp", "wire.compression=topk", "wire.topk_ratio=0.1"],
    ["consistency.mode=asp", "wire.compression=int2_ef"],
    ["consistency.mode=asp", "wire.compression={replies: int8}"],  # workers train on decoded replies
    ["consistency.mode=asp", f"wire.compression={BY_TENSOR}"],  # a shard's push in an int8 and an fp32 run
    ["consistency.mode=asp", "cluster.servers=3", f"wire.compression={PER_SHARD}"],  # int8, int8 and fp32 shards
], ids=["asp", "ssp", "asp-topk", "asp-int2ef", "asp-int8-replies", "asp-by-tensor", "asp-per-shard"])
def test_a_real_run_replays_to_bit_identical_parameters(tmp_path, overrides, request):
    if overrides == ["consistency.mode=asp"]:
        run_dir, summary = request.getfixturevalue("asp_run")
    else:
        run_dir = tmp_path / "run"
        code, output, summary = launch(_config(tmp_path), run_dir, *SHORT, *overrides, timeout=100)
        assert code == 0, output
    code, result, err = _replay(run_dir, "--out", str(tmp_path / "replayed.pt"))
    assert code == 0, (result, err)
    assert result["identical"] and result["compared_model"]
    assert result["gradients"] == summary["worker_steps"] == WORKERS * STEPS
    shards = 3 if "cluster.servers=3" in overrides else 2
    assert result["pushes"] == shards * WORKERS * STEPS  # every push to every shard, re-executed
    replayed = torch.load(tmp_path / "replayed.pt", weights_only=True)
    saved = torch.load(run_dir / "model.pt", weights_only=True)
    assert replayed.keys() == saved.keys()
    assert all(torch.equal(replayed[k], saved[k]) for k in saved)
    # The order mattered: gradients were applied at several different stalenesses.
    assert len(summary["staleness_hist"]) > 1, summary["staleness_hist"]
    layout = make_layout([(k, tuple(v.shape)) for k, v in saved.items()], shards)  # the mlp: parameters only
    sizes = layout.shard_sizes
    encoding = "int8" if "replies" in overrides[-1] else "none"
    assert summary["pull_compression_ratio"] == round(sum(reply_nbytes(encoding, n) for n in sizes)
                                                      / (4 * sum(sizes)), 6)
    if "{" in overrides[-1] and "replies" not in overrides[-1]:  # bytes per example: every run's encoded bytes
        plans = push_plans(load_config(None, [overrides[-1]]).wire, layout, local_updates=False)
        expected = [["int8"], ["int8", "none"]] if BY_TENSOR in overrides[-1] else [["int8"], ["int8"], ["none"]]
        assert [[r.encoding for r in plan] for plan in plans] == expected
        assert summary["compression_ratio"] == round(sum(wire_nbytes(r.encoding, r.numel) for plan in plans
                                                         for r in plan) / (4 * sum(sizes)), 6)
    assert (summary["codec_reply_encode_s"] is None) is (encoding == "none")


@pytest.mark.timeout(200)
def test_a_replay_of_another_order_is_not_called_identical(tmp_path, asp_run):
    run_dir = _copy(asp_run[0], tmp_path)
    # Two successive pushes of different workers on shard 0, swapped: another order, another run.
    path = run_dir / "record" / "shard-0.msgpack"
    records = list(msgpack.Unpacker(open(path, "rb"), raw=False))
    pushes = [i for i, r in enumerate(records) if r[0] == "push"]
    i, j = next((i, j) for i, j in zip(pushes, pushes[1:]) if records[i][1] != records[j][1]
                and records[j][4] <= records[i][6] - 1)  # the second was computed before the first applied
    records[i], records[j] = records[j], records[i]
    path.write_bytes(b"".join(msgpack.packb(r) for r in records))
    code, result, err = _replay(run_dir)
    assert code == 1, (result, err)
    assert not result["identical"] and result["version_mismatch"]


@pytest.mark.timeout(200)
def test_what_cannot_be_replayed_is_refused_with_the_reason(tmp_path, asp_run):
    config = _config(tmp_path)
    # Two steps: what is checked is that nothing was recorded, whatever the run's length.
    code, output, _ = launch(config, tmp_path / "off", *SHORT, "run.record=false", "train.steps_per_worker=2",
                             timeout=100)
    assert code == 0, output
    assert not (tmp_path / "off" / "record").exists()
    code, _, err = _replay(tmp_path / "off")
    assert code == 2 and "run.record: false" in err, err
    # A shard that did not stop cleanly leaves a record without its end.
    cut = _copy(asp_run[0], tmp_path)
    record = cut / "record" / "shard-1.msgpack"
    record.write_bytes(record.read_bytes()[:-2])
    code, _, err = _replay(cut)
    assert code == 2 and "did not stop cleanly" in err, err


DILOCO = ["local.steps=8", "local.outer_lr=0.7", "local.outer_momentum=0.9", "local.outer_nesterov=true",
          "optimizer.name=adamw", "optimizer.lr=0.01"]


@pytest.mark.timeout(120)
def test_local_updates_replay_exactly_and_the_simulator_runs_the_same_rounds(tmp_path):
    # Asynchronous DiLoCo with dynamic rounds: each round's length came from timing, and the record has it.
    code, output, _ = launch(_config(tmp_path), tmp_path / "adiloco", *SHORT, *DILOCO, "consistency.mode=asp",
                             "local.dynamic=true", "local.delayed_nesterov=true", timeout=100)
    assert code == 0, output
    code, result, err = _replay(tmp_path / "adiloco")
    assert code == 0 and result["identical"], (result, err)
    assert result["gradients"] == WORKERS * STEPS and result["pushes"] < result["gradients"]  # rounds, not steps
    # Synchronous DiLoCo: the simulator takes the same rounds from the same data; only the order in
    # which a BSP shard sums the four deltas differs.
    real = tmp_path / "diloco"
    code, output, _ = launch(_config(tmp_path), real, *SHORT, *DILOCO, "consistency.mode=bsp", timeout=100)
    assert code == 0, output
    code, output, summary = launch(real / "config.yaml", tmp_path / "sim", "cluster.launcher=sim", timeout=100)
    assert code == 0, output
    assert summary["total_updates"] == math.ceil(STEPS / 8)  # rounds, the last, shorter one flushed
    a = torch.load(real / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "sim" / "model.pt", weights_only=True)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-5) for k in a)


SPARSELOCO = [*DILOCO, "local.method=sparseloco", "local.outer_nesterov=false", "local.outer_momentum=0.95",
              "local.outer_lr=1.0", "wire.compression=topk_int2", "wire.topk_ratio=0.03"]


@pytest.mark.timeout(200)
def test_sparseloco_runs_for_real_replays_exactly_and_the_simulator_sends_the_same_bytes(tmp_path):
    real = tmp_path / "real"
    code, output, summary = launch(_config(tmp_path), real, *SHORT, *SPARSELOCO, "consistency.mode=asp", timeout=100)
    assert code == 0, output
    code, result, err = _replay(real)
    assert code == 0 and result["identical"], (result, err)
    # Every delta push carries k = 3% of each shard's coordinates (an int32 index and a 2-bit code
    # each, one fp32 scale per 64): a round per 8 steps per worker (the last, shorter one flushed), each worker.
    cfg = load_config(real / "config.yaml")
    saved = torch.load(real / "model.pt", weights_only=True)
    sizes = make_layout([(k, tuple(v.shape)) for k, v in saved.items()], cfg.cluster.num_servers).shard_sizes
    per_push = sum(wire_nbytes("topk_int2", n, topk_count(n, 0.03)) for n in sizes)
    assert summary["wire_bytes_sent"] == WORKERS * math.ceil(STEPS / 8) * per_push
    code, output, simulated = launch(real / "config.yaml", tmp_path / "sim", "cluster.launcher=sim", timeout=100)
    assert code == 0, output
    assert simulated["wire_bytes_sent"] == summary["wire_bytes_sent"]
