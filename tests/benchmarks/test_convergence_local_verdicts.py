"""benchmarks/convergence/literature_local.py: the local-update claims (bytes,
examples to the target, time per epoch) judged from seeds' rows whose answer
is known, and the -local section of the verdicts page."""
import csv
import math

from conftest import load_script

verdicts = load_script("benchmarks/convergence/verdicts.py")
local = load_script("benchmarks/convergence/literature_local.py")
SeedRow = local.SeedRow

INF = math.inf


def rows(label, times, eps=1000.0, bpe=100.0, finals=None, ran_s=None):
    """One row per seed; eps and bpe: one value for every seed or one per seed; ran_s: each run's length."""
    n = len(times)
    eps = eps if isinstance(eps, list) else [eps] * n
    bpe = bpe if isinstance(bpe, list) else [bpe] * n
    finals = finals or [0.9] * n
    return [SeedRow(label, s, t, finals[s], eps[s], bpe[s], ran_s) for s, t in enumerate(times)]


def test_examples_and_bytes_to_target_per_seed():
    r = SeedRow("bsp", 0, 2.5, 0.9, 1000.0, 40.0)
    assert (r.examples_to_target, r.bytes_to_target) == (2500.0, 100_000.0)
    never = SeedRow("bsp", 0, INF, 0.5, 1000.0, 40.0)
    assert never.examples_to_target == INF and never.bytes_to_target == INF
    old_csv = SeedRow("bsp", 0, 2.5, 0.9, 1000.0, None)  # written before the wire-bytes column
    assert old_csv.examples_to_target == 2500.0 and old_csv.bytes_to_target is None


def test_far_fewer_bytes():
    bsp = rows("bsp", [10, 10.5, 11], bpe=800.0)
    # The same time and rate at an eighth of the bytes per example: ratio 0.125.
    verdict, evidence = local.judge_far_fewer_bytes(rows("bsp+h8", [10, 10.5, 11], bpe=100.0), bsp)
    assert verdict == "confirmed" and "faster: ratio 0.12 [0.12, 0.12] (±10% margin, paired by seed)" in evidence
    # The same bytes per example, so about the same bytes: not "far fewer".
    assert local.judge_far_fewer_bytes(rows("bsp+h8", [10, 10.5, 11], bpe=800.0), bsp)[0] == "not confirmed"
    # Bytes to the target straddling half of BSP's: these seeds cannot tell.
    straddle = rows("bsp+h8", [10, 10, 10], bpe=[0.3 * 840, 0.5 * 840, 0.7 * 840])
    assert local.judge_far_fewer_bytes(straddle, rows("bsp", [10, 10, 10], bpe=840.0))[0] == "inconclusive"
    # Never reaching the target: censored at what the run pushed by its end. Past BSP's bytes to the
    # target, that decides it (by the cap); short of them, nothing is known.
    verdict, evidence = local.judge_far_fewer_bytes(rows("bsp+h8", [INF] * 3, bpe=100.0, ran_s=150.0), bsp)
    assert verdict == "not confirmed" and "slower: ratio" in evidence and "decided by the cap" in evidence
    assert local.judge_far_fewer_bytes(rows("bsp+h8", [INF] * 3, bpe=100.0, ran_s=20.0), bsp)[0] == "inconclusive"
    assert local.judge_far_fewer_bytes(rows("bsp+h8", [INF] * 3, bpe=100.0), bsp)[0] == "inconclusive"
    # Reaching it where BSP never did within runs that pushed four times as much: confirmed, by the cap.
    verdict, evidence = local.judge_far_fewer_bytes(rows("bsp+h8", [9, 10, 11]), rows("bsp", [INF] * 3, ran_s=40.0))
    assert verdict == "confirmed" and "decided by the cap" in evidence
    assert local.judge_far_fewer_bytes(rows("bsp+h8", [9, 10, 11]), rows("bsp", [INF] * 3))[0] == "inconclusive"
    assert local.judge_far_fewer_bytes(rows("bsp+h8", [INF] * 3), rows("bsp", [INF] * 3))[0] == "inconclusive"
    assert local.judge_far_fewer_bytes(rows("bsp+h8", [9, 10, 11], bpe=None), bsp)[0] == "not tested"


def test_fewer_examples_and_the_tie():
    sync = rows("bsp+h8+diloco", [10, 11, 12])          # 10k, 11k, 12k examples
    naive = rows("asp+h8+diloco", [20, 21, 22])
    verdict, evidence = local.judge_fewer_examples(sync, naive)
    assert verdict == "confirmed"
    assert evidence.startswith("11.0k [10.0k, 12.0k] vs asp+h8+diloco 21.0k [20.0k, 22.0k] examples to the target, "
                               "faster: ratio 0.52 ")
    assert local.judge_fewer_examples(naive, sync)[0] == "not confirmed"
    assert local.judge_fewer_examples(rows("x", [10, 16, 22]), naive)[0] == "inconclusive"
    # Examples, not seconds: twice the time at half the rate is the same number of examples.
    dn = rows("asp+h8+diloco+dn", [20, 22, 24], eps=500.0)
    assert local.judge_examples_tie(dn, sync)[0] == "confirmed"      # 10k, 11k, 12k: the same in every seed
    dn = rows("asp+h8+diloco+dn", [24, 20, 22], eps=500.0)
    assert local.judge_examples_tie(dn, sync)[0] == "inconclusive"   # per seed 1.2, 0.91, 0.92
    dn = rows("asp+h8+diloco+dn", [21.8, 22, 22.2], eps=500.0)
    verdict, evidence = local.judge_examples_tie(dn, rows("bsp+h8+diloco", [10.8, 11, 11.2]))
    assert verdict == "confirmed" and "tied: ratio 1.00 [0.98, 1.02] (±10% margin, paired by seed)" in evidence
    assert local.judge_examples_tie(naive, sync)[0] == "not confirmed"   # ratio about 1.9
    never = rows("asp+h8+diloco+dn", [INF] * 3, ran_s=30.0)  # 30k examples and still short of the target
    assert local.judge_examples_tie(never, sync)[0] == "not confirmed"   # sync held it by 12k
    assert local.judge_examples_tie(rows("asp+h8+diloco+dn", [INF] * 3), sync)[0] == "inconclusive"  # ran how long?
    assert local.judge_examples_tie(never, rows("bsp+h8+diloco", [INF] * 3))[0] == "inconclusive"  # neither


def test_faster_per_epoch_needs_both_speed_and_quality():
    asp = rows("asp", [10, 11, 12], eps=[1000.0, 1100.0, 1200.0], finals=[0.85, 0.86, 0.87])
    geo = rows("asp+h8", [9, 10, 11], eps=[2000.0, 2100.0, 2200.0], finals=[0.84, 0.86, 0.88])
    verdict, evidence = local.judge_faster_epochs(geo, asp, True)
    assert verdict == "confirmed" and "-> time per example faster: ratio 0.52" in evidence and \
        evidence.endswith("tied: ratio 1.00 [0.97, 1.03] (±10% margin, paired by seed): confirmed")
    worse = rows("asp+h8", [INF] * 3, eps=[2000.0, 2100.0, 2200.0], finals=[0.5, 0.52, 0.54])
    assert local.judge_faster_epochs(worse, asp, True)[0] == "not confirmed"   # faster, but not equal quality
    slower = rows("asp+h8", [9, 10, 11], eps=[500.0, 550.0, 600.0], finals=[0.85, 0.86, 0.87])
    assert local.judge_faster_epochs(slower, asp, True)[0] == "not confirmed"
    same = rows("asp+h8", [9, 10, 11], eps=[1050.0, 1150.0, 1250.0], finals=[0.85, 0.86, 0.87])
    # About 4.5% more examples/s in every seed: tied within ±10%, which refutes "faster per epoch".
    assert local.judge_faster_epochs(same, asp, True)[0] == "not confirmed"
    noisy = rows("asp+h8", [9, 10, 11], eps=[1300.0, 900.0, 1250.0], finals=[0.85, 0.86, 0.87])
    assert local.judge_faster_epochs(noisy, asp, True)[0] == "inconclusive"


def test_local_verdicts_pair_the_modes_by_their_local_steps():
    none = {"bsp": rows("bsp", [10, 10.5, 11], bpe=800.0), "asp": rows("asp", [8, 9, 10], eps=900.0),
            "bsp+h8": rows("bsp+h8", [9, 10, 11], bpe=100.0), "bsp+h8+diloco": rows("bsp+h8+diloco", [5.45, 5.5, 5.55]),
            "asp+h8": rows("asp+h8", [7, 8, 9], eps=1800.0), "asp+h8+diloco": rows("asp+h8+diloco", [9, 10, 11]),
            "asp+h8+diloco+dn": rows("asp+h8+diloco+dn", [5.4, 5.5, 5.6])}
    claims = {c.claim.split(": ", 1)[1]: c for c in local.local_verdicts({"none": none}, "w-local", True)}
    assert len(claims) == 5
    by = [claims[k] for k in claims]
    assert by[0].verdict == "confirmed" and by[0].source == "Douillard et al. 2023"
    assert [e.split(" ")[1] for e in by[0].evidence.split("; ")] == ["bsp+h8", "bsp+h8+diloco"]  # each against bsp
    assert by[1].evidence.startswith("none: bsp+h8+diloco ") and by[1].verdict == "confirmed"   # 5.5k vs 10k
    assert by[2].evidence.startswith("none: asp+h8+diloco+dn ") and by[2].verdict == "confirmed"
    assert by[3].claim.endswith("tie synchronous DiLoCo's") and by[3].verdict == "confirmed"  # 5.5k vs 5.5k
    assert by[4].source == "Paddle PR #20018" and by[4].verdict == "confirmed"   # twice asp's examples/s
    # Without the modes a claim is not tested, not judged.
    claims = local.local_verdicts({"none": {"bsp": none["bsp"], "asp": none["asp"]}}, "w-local", True)
    assert {c.verdict for c in claims} == {"not tested"}


FIELDS = ["label", "lr", "seed", "chosen_lr", "time_to_target_s", "final_metric", "train_time_s", "examples",
          "examples_per_s", "wire_bytes_per_example"]


def write_case(path, modes):
    path.mkdir(parents=True)
    with open(path / "seeds.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for label, times, bpe in modes:
            for seed, t in enumerate(times):
                w.writerow({"label": label, "lr": 0.1, "seed": seed, "chosen_lr": True, "time_to_target_s": t,
                            "final_metric": 0.9, "train_time_s": 18, "examples": 18000, "examples_per_s": 1000,
                            "wire_bytes_per_example": bpe})


def test_the_local_group_is_a_section_with_its_own_claims(tmp_path):
    write_case(tmp_path / "mnist1d-none", [("bsp", [10, 11, 12], 800), ("ssp:2", [9, 10.5, 11], 800)])
    write_case(tmp_path / "mnist1d-local-lr", [("bsp", [1], 800)])
    write_case(tmp_path / "mnist1d-local-adamw-lr", [("bsp+h8+diloco", [1], 100)])
    write_case(tmp_path / "mnist1d-local-none", [("bsp", [10, 11, 12], 800), ("bsp+h8", [9, 10, 11], 100)])
    page = verdicts.verdicts_page(tmp_path)
    sections = {s.split("\n", 1)[0]: s for s in page.split("## ")[1:]}
    main, loc = sections["mnist1d"], sections["mnist1d-local"]
    assert "SSP ties BSP" in main and "far fewer bytes" not in main
    assert "SSP ties BSP" not in loc and "GEO-SGD takes less time per epoch" in loc
    assert ("| local SGD and DiLoCo reach BSP's target with far fewer bytes pushed (at most half) | "
            "Douillard et al. 2023 | **confirmed** | none: bsp+h8 1.0 MB [0.9 MB, 1.1 MB] vs bsp 8.8 MB "
            "[8.0 MB, 9.6 MB] to the target, faster: ratio 0.11 [") in loc
    assert "| bsp+h8 | 10.0k [9.0k, 11.0k] | 1.0 MB [0.9 MB, 1.1 MB] | 1000 [1000, 1000] |" in loc
    assert "adamw" not in page   # grids are not cases
