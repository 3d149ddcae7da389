"""The all-reduce baseline end to end: real `psgd launch` runs (DDP over gloo
on loopback), compared with a BSP run of the same config and seed."""
import pytest
import torch
from conftest import launch, read_events


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_allreduce_and_bsp_reach_the_same_parameters_after_60_steps(small_config, tmp_path):
    # Plain SGD, no momentum: BSP's averaged server step and DDP's averaged
    # gradient are the same algorithm, so the parameters must agree.
    cfg = small_config(optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.0},
                       train={"steps_per_worker": 60, "max_time_s": 60, "target_accuracy": 0.5})
    results = {}
    # A straggler changes the timing of a synchronous run, never its maths, so
    # the all-reduce run also has one (checked below).
    sets = {"allreduce": ["workers.slowdown={1: 4.0}"], "bsp": []}
    for mode in ("allreduce", "bsp"):
        out = tmp_path / mode
        code, output, summary = launch(cfg, out, f"consistency.mode={mode}", *sets[mode])
        assert code == 0, output
        assert summary["mode"] == mode and summary["total_updates"] == 60, summary
        results[mode] = (out, summary)

    ar = torch.load(results["allreduce"][0] / "model.pt", weights_only=True)
    bsp = torch.load(results["bsp"][0] / "model.pt", weights_only=True)
    assert ar.keys() == bsp.keys()
    for name in ar:
        torch.testing.assert_close(ar[name], bsp[name], rtol=0, atol=1e-4, msg=f"{name} differs")
    # The runs trained: parameters moved away from the (shared) initialisation.
    assert results["allreduce"][1]["final_test_accuracy"] > 0.5

    ar_out, ar_summary = results["allreduce"]
    assert ar_summary["staleness_max"] == 0 and ar_summary["max_clock_gap"] == 0
    assert ar_summary["worker_steps"] == 2 * 60
    events = read_events(ar_out)
    steps = [e for e in events if e["event"] == "step"]
    assert {e["rank"] for e in steps} == {0, 1}
    assert sorted(e["clock"] for e in steps if e["rank"] == 0) == list(range(1, 61))
    assert all({"loss", "compute_s", "comm_s", "step_s", "gap"} <= e.keys() for e in steps)
    # The evaluator measured the all-reduce run like a PS run, ending at all 60 updates.
    evals = [e for e in events if e["event"] == "eval"]
    assert evals and evals[-1].get("final") and evals[-1]["updates"] == 60
    assert ar_summary["final_test_accuracy"] == evals[-1]["accuracy"]
    assert not (ar_out / "allreduce_params.request").exists()

    # Rank 1 sleeps 3x its compute time before its last all-reduce, so its
    # steps take at least 4x its compute; rank 0 waits for it in the collective.
    rank1 = [e for e in steps if e["rank"] == 1][1:]
    assert all(e["step_s"] >= 4 * e["compute_s"] * 0.99 for e in rank1)
    assert all(e["comm_s"] >= 0 for e in steps)
