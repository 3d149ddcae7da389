"""The fault-storm arithmetic on constructed event logs: the kill plan, useful updates and
goodput, acked against applied (with a push a killed worker got to one shard only and an
ack unread at the time limit), time lost per fault, and the analysis over seeds."""
import math
from pathlib import Path

import pytest

from psgd.bench.fault_metrics import (
    RESTART_MARGIN_S,
    FaultTarget,
    Kill,
    Recovery,
    account,
    goodput,
    kill_schedule,
    recoveries,
    restarts_needed,
    useful_updates,
)
from psgd.bench.fault_report import FloorVerdict, analyse_faults, fault_table, judge_floor
from psgd.bench.faults import FAULT_FREE, FAULTY, FaultBench, FaultRun, Pairing, plan_overrides
from psgd.bench.stats import Interval, median_ci
from psgd.bench.verdict import Outcome
from psgd.config import load_config
from psgd.config.modes import Role


def stats(shard, version, clocks, final=True, **counters):
    return {"t": 50.0, "role": "server", "index": shard, "event": "server_stats", "final": final,
            "version": version, "clocks": clocks, "counters": {"push_applied": version, **counters}}


def done(rank, clock, pushes):
    return {"t": 49.0, "role": "worker", "index": rank, "event": "done", "rank": rank, "clock": clock,
            "pushes": pushes, "steps": clock, "resends": 0}


def register(shard, rank, t):
    return {"t": t, "role": "server", "index": shard, "event": "register", "rank": rank, "clock": 0}


def restart(role, index, t):
    return {"t": t, "role": "launcher", "index": 0, "event": "restart", "process": role, "process_index": index,
            "attempt": 1, "cause": "exited with code -9"}


def test_kill_plan_one_every_period_targets_in_turn_none_near_the_end():
    plan = kill_schedule(10, 120, 4)
    assert plan == [(10, 0), (20, 1), (30, 2), (40, 3), (50, 0), (60, 1), (70, 2), (80, 3), (90, 0), (100, 1),
                    (110, 2)]
    assert restarts_needed(plan) == 3  # ranks 0, 1 and 2 are killed three times
    assert kill_schedule(7, 20, 4) == [(7, 0), (14, 1)]
    assert kill_schedule(10, 10 + RESTART_MARGIN_S, 2) == []  # a kill at 10 s would be too close to the end
    # The k-th restart of a process waits backoff * 2**k: shard 0's sixth kill (at 110 s) would
    # be restarted 16 s later, after the end, so it is left out; shard 1's fifth (100 s + 8 s) fits.
    assert kill_schedule(10, 120, 2, backoff_s=0.5) == [(t, (t // 10 - 1) % 2) for t in range(10, 110, 10)]
    assert restarts_needed([]) == 0
    with pytest.raises(ValueError, match="kill-every-s"):
        kill_schedule(0, 120, 4)
    with pytest.raises(ValueError, match="no process"):
        kill_schedule(10, 120, 0)


def test_plan_overrides_give_every_run_the_restarts_the_storm_needs():
    cfg = load_config(None, ["cluster.workers=4", "cluster.servers=2", "consistency.mode=asp",
                             "train.max_time_s=120", "supervision.max_restarts=1"])
    plan, sets = plan_overrides(cfg, FaultTarget.WORKERS, 10)
    assert len(plan) == 11 and sets == ["cluster.launcher=local", "supervision.max_restarts=3"]
    plan, sets = plan_overrides(cfg, FaultTarget.SHARDS, 10)
    assert [i for _, i in plan] == [0, 1] * 5 and sets[-1] == "supervision.max_restarts=5"  # backoff 0.5 s
    with pytest.raises(ValueError, match="all-reduce ranks cannot rejoin"):
        plan_overrides(load_config(None, ["consistency.mode=allreduce"]), FaultTarget.WORKERS, 10)
    with pytest.raises(ValueError, match="no kill fits"):
        plan_overrides(load_config(None, ["train.max_time_s=8"]), FaultTarget.WORKERS, 10)


def test_useful_updates_are_what_every_shard_applied_by_its_final_stats():
    events = [stats(0, 40, [20, 20], final=False), stats(0, 100, [50, 50]), stats(1, 99, [50, 49])]
    assert useful_updates(events) == 99  # the least over shards, from each shard's last stats
    assert goodput(events, 12.5) == 99 / 12.5
    assert useful_updates([]) == 0
    with pytest.raises(ValueError, match="no training time"):
        goodput(events, 0.0)


def test_acked_equals_applied_reconciles_a_partial_push_and_an_ack_unread_at_the_stop():
    # Rank 0 was killed while sending seq 29: shard 0 applied it, shard 1 never saw it; the
    # successor took seq 30 on (pushes 41 = seqs 0..40). Shard 0 therefore applied 41 of rank
    # 0's pushes but holds its clock at 40 (the successor's clock comes from the lowest
    # shard). Rank 1's last push was applied on both shards but the stop cut off its ack.
    events = [stats(0, 41 + 31, [40, 31]), stats(1, 40 + 31, [40, 31], partial_pushes=1),
              done(0, 40, 41), done(1, 30, 30)]
    a0, a1 = account(events, workers=2)
    assert (a0.applied, a0.acked, a0.worker_pushes, a0.partial, a0.unread_at_stop) == (72, 72, 71, 0, 1)
    assert (a1.applied, a1.acked, a1.worker_pushes, a1.partial, a1.unread_at_stop) == (71, 71, 71, 1, 1)
    assert a0.holds and a1.holds


def test_acked_equals_applied_names_every_disagreement():
    # A push applied twice (version one more than the workers' seqs explain).
    a, = account([stats(0, 61, [30, 30]), done(0, 30, 30), done(1, 30, 30)], workers=2)
    assert a.problems == ("shard 0: the workers used 60 seqs; applied 61 + never seen 0 - ack unread at the stop 0 = 61",)
    # An update the shard applied without acknowledging it as applied.
    ev = stats(0, 60, [30, 30])
    ev["counters"]["push_applied"] = 59
    a, = account([ev, done(0, 30, 30), done(1, 30, 30)], workers=2)
    assert a.problems == ("shard 0: applied 60 updates, acknowledged 59 as applied",)
    # A rank two clocks behind its shard, and a rank that never finished.
    a, = account([stats(0, 62, [32, 30]), done(0, 30, 32)], workers=2)
    assert a.problems == ("rank 1 never finished (no done event)",
                          "shard 0: rank 0 ended at clock 30, the shard has it at 32")
    assert not a.holds


def test_time_lost_runs_from_the_kill_to_the_last_registration_that_brings_it_back():
    kill = Kill(5.0, Role.WORKER, 1, 4242)
    events = [register(0, 1, 0.0), register(1, 1, 0.0),        # the first incarnation, before the kill
              register(0, 0, 5.5),                             # another rank: not this recovery
              restart("worker", 1, 5.25), register(0, 1, 5.75), register(1, 1, 6.25)]
    rec, = recoveries(events, [kill], workers=2, shards=2)
    assert (rec.restarted_at, rec.rejoined_at, rec.lost_s) == (5.25, 6.25, 1.25)
    # Back on one shard only: never rejoined.
    rec, = recoveries(events[:-1], [kill], workers=2, shards=2)
    assert rec.rejoined_at is None and rec.lost_s is None


def test_a_killed_shard_is_back_when_every_worker_registered_with_it_again():
    kill = Kill(10.0, Role.SERVER, 0, 77)
    events = [restart("server", 0, 10.5), register(0, 0, 11.0), register(1, 1, 11.0), register(0, 1, 12.5),
              register(0, 0, 14.0)]  # a later re-registration does not move the recovery
    rec, = recoveries(events, [kill], workers=2, shards=2)
    assert (rec.restarted_at, rec.rejoined_at, rec.lost_s) == (10.5, 12.5, 2.5)


def test_a_replicated_shards_restarted_process_counts_for_its_shard_whatever_its_number():
    # cluster.replicas: shard 0's processes are 0 and 2 (of 2 shards); the killed primary was process 2.
    kill = Kill(10.0, Role.SERVER, 0, 77)
    events = [restart("server", 3, 10.1), restart("server", 2, 10.2), register(0, 0, 10.3), register(0, 1, 10.4)]
    rec, = recoveries(events, [kill], workers=2, shards=2)
    assert (rec.restarted_at, rec.rejoined_at) == (10.2, 10.4)


def run(label, seed, updates, wall=100.0, kills=0, accuracy=0.95, loss=0.2, lost=()):
    ks = [Kill(10.0 * (i + 1), Role.WORKER, i % 4, 1000 + i) for i in range(kills)]
    recs = [Recovery(k, k.t + 0.25, k.t + x) for k, x in zip(ks, lost)]
    summary = {"status": "ok", "wall_time_s": wall, "final_test_accuracy": accuracy, "final_test_loss": loss}
    return FaultRun(label, seed, Path("/nonexistent"), 0, "done", summary, ks, updates, updates / wall, [], recs,
                    (1.0, 1.0))


def bench_of(runs):
    cfg = load_config(None, ["train.max_time_s=100"])
    return FaultBench(cfg, FaultTarget.WORKERS, 10.0, kill_schedule(10, 100, 4), [], Path("/nonexistent"),
                      Pairing.SIDE_BY_SIDE, runs)


def test_analysis_pairs_each_seed_and_costs_the_storm_in_fault_free_seconds():
    runs = [run(FAULT_FREE, 0, 10000), run(FAULTY, 0, 9000, kills=10, accuracy=0.94, lost=[1.0] * 10),
            run(FAULT_FREE, 1, 20000), run(FAULTY, 1, 19000, kills=10, lost=[2.0] * 10),
            run(FAULT_FREE, 2, 10000), run(FAULTY, 2, 9500, kills=10, lost=[1.5] * 10)]
    a = analyse_faults(bench_of(runs), floor=0.9)
    assert a.seeds == [0, 1, 2] and a.ratios == [0.9, 0.95, 0.95]
    assert a.ratio == median_ci([0.9, 0.95, 0.95])
    assert a.goodput[FAULT_FREE].median == 100.0 and a.goodput[FAULTY].median == 95.0
    # Seed 0 lost 1000 updates at 100/s over 10 kills: 1 s each; seeds 1 and 2: 0.5 s each.
    assert a.equivalent_lost_s == median_ci([1.0, 0.5, 0.5])
    assert a.lost_s == median_ci([1.0] * 10 + [2.0] * 10 + [1.5] * 10)
    assert a.kills == 30 and a.never_rejoined == 0 and a.accounting_problems == []
    assert a.accuracy[FAULTY] == median_ci([0.94, 0.95, 0.95])
    assert a.verdict is judge_floor(a.ratio, 0.9)
    # Paired by seed, the per-seed ratios 0.90, 0.95, 0.95: their interval reaches below the ±10%
    # margin, so the rule cannot call it a tie (nor a loss: it reaches above 1 too).
    g = a.verdicts["goodput"]
    assert g.outcome is Outcome.INCONCLUSIVE and g.paired
    assert g.ratio.median == pytest.approx(math.exp(sum(math.log(r) for r in a.ratios) / 3))
    assert g.ratio.low < 0.9 < g.ratio.median < 1.0 < g.ratio.high
    assert "goodput under faults / fault-free" in "\n".join(fault_table(bench_of(runs), a))


def test_the_verdict_rule_ties_a_storm_that_costs_one_percent_on_every_seed():
    runs = [run(FAULT_FREE, k, 10000 * (k + 1)) for k in range(3)]
    runs += [run(FAULTY, k, 9900 * (k + 1), kills=10, loss=0.2) for k in range(3)]
    a = analyse_faults(bench_of(runs))
    assert a.verdicts["goodput"].outcome is Outcome.TIED
    assert a.verdicts["goodput"].ratio.low == pytest.approx(0.99) == a.verdicts["goodput"].ratio.high
    assert a.verdicts["loss"].outcome is Outcome.TIED  # the same loss on every seed
    lower = [run(FAULT_FREE, k, 10000) for k in range(3)] + [run(FAULTY, k, 9900, kills=10, loss=0.1) for k in range(3)]
    table = "\n".join(fault_table(bench_of(lower), analyse_faults(bench_of(lower))))
    assert "loss lower: ratio 0.50 [0.50, 0.50]" in table  # half the fault-free loss: better, in the loss's words


def test_runs_without_an_evaluator_are_compared_on_goodput_alone():
    runs = [run(FAULT_FREE, k, 10000) for k in range(2)] + [run(FAULTY, k, 9000, kills=10) for k in range(2)]
    for r in runs:
        r.summary["final_test_accuracy"] = r.summary["final_test_loss"] = None  # eval.enabled: false
    a = analyse_faults(bench_of(runs))
    assert a.accuracy is None and a.loss is None and set(a.verdicts) == {"goodput"}
    assert "goodput under faults / fault-free" in "\n".join(fault_table(bench_of(runs), a))


def test_a_seed_whose_run_failed_is_left_out_and_none_without_a_pair():
    failed = run(FAULTY, 1, 0)
    failed.code = 1
    runs = [run(FAULT_FREE, 0, 10000), run(FAULTY, 0, 9000, kills=10), run(FAULT_FREE, 1, 10000), failed]
    assert analyse_faults(bench_of(runs)).seeds == [0]
    assert analyse_faults(bench_of([run(FAULT_FREE, 0, 10000)])) is None


def test_the_floor_holds_only_when_the_whole_interval_clears_it():
    assert judge_floor(Interval(0.95, 0.91, 0.97, 5), 0.9) is FloorVerdict.HOLDS
    assert judge_floor(Interval(0.95, 0.90, 0.97, 5), 0.9) is FloorVerdict.HOLDS  # at the floor counts
    assert judge_floor(Interval(0.85, 0.80, 0.89, 5), 0.9) is FloorVerdict.FAILS
    assert judge_floor(Interval(0.92, 0.88, 0.97, 5), 0.9) is FloorVerdict.INCONCLUSIVE
    assert judge_floor(Interval(0.99, 0.99, 0.99, 1), 0.9) is FloorVerdict.INCONCLUSIVE  # one seed decides nothing
