"""results.csv, verdicts.csv and report.md from measurements.jsonl (validate.py).

Sides: "real" (the testbed), "sim" (the simulator given testbed.yaml, the stated
links and the host's per-message cost calibrated outside the matrix) and
"stated" (the same without that cost: the sim's default 10 us links and 30 us
requests). Judged: "sim". A quantity holds when its simulated median over the
seeds is within ±15% of the real one; the fraction that holds gets a 95%
Clopper-Pearson interval (the cells are not independent draws, so read it as
the spread a count this size allows, not as a population estimate).
"""
from __future__ import annotations

import csv
import itertools
import math
import statistics
from pathlib import Path

from psgd.bench.shaped_net import LinkShape
from psgd.bench.verdict import Sample, judge

__all__ = ["TOLERANCE", "write_tables"]

TOLERANCE = 0.15
SIDES = ("real", "sim", "stated")
VERDICT_QUANTITIES = ("wall_time_s", "time_to_target_s")  # lower is faster
ROW_FIELDS = ["cell", "workers", "mode", "case", "net", "quantity", "seeds", "real", "simulated", "error", "within",
              "stated_only", "stated_error", "stated_within"]
VERDICT_FIELDS = ["workers", "case", "net", "quantity", "a", "b", "real", "simulated", "agree", "stated_only",
                  "stated_agree"]


def write_tables(out: Path, measured: list[dict], shape: LinkShape, quick: bool) -> str:
    """Writes the three files; returns the one-line summary."""
    runs = [m for m in measured if m["side"] in SIDES]
    host = [m for m in measured if m["side"] == "host_cost"]
    cells = _cells(runs)
    rows, verdicts = _rows(cells, runs), _verdicts(cells, runs)
    for name, table, fields in (("results.csv", rows, ROW_FIELDS), ("verdicts.csv", verdicts, VERDICT_FIELDS)):
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(table)
    head = {side: _score(rows, verdicts, side) for side in ("sim", "stated")}
    conclusion = out / "conclusion.md"  # written by hand from the tables: it goes first
    first = conclusion.read_text() + "\n" if conclusion.exists() else ""
    (out / "report.md").write_text(first + _markdown(rows, verdicts, head, host, runs, shape, quick))
    return head["sim"]["line"] + f" (stated only: {head['stated']['line']})"


def _cells(runs: list[dict]) -> list[dict]:
    seen: dict[str, dict] = {}
    for m in runs:
        seen.setdefault(m["cell"], {k: m[k] for k in ("cell", "workers", "mode", "case", "net")})
    return list(seen.values())


def _by(runs: list[dict], side: str, cell: str) -> dict[int, dict]:
    return {m["seed"]: m for m in runs if m["side"] == side and m["cell"] == cell}


def _median(values):
    return statistics.median([math.inf if v is None else v for v in values])


def _rows(cells, runs) -> list[dict]:
    rows = []
    for c in cells:
        per = {side: _by(runs, side, c["cell"]) for side in SIDES}
        seeds = sorted(set(per["real"]) & set(per["sim"]))
        if not seeds:
            continue
        for k in per["real"][seeds[0]]["quantities"]:
            med = {side: _median([per[side][s]["quantities"][k] for s in seeds]) if all(s in per[side] for s in seeds)
                   else None for side in SIDES}
            row = {**c, "quantity": k, "seeds": len(seeds), "real": _fmt(med["real"]), "simulated": _fmt(med["sim"]),
                   "error": _error(med["real"], med["sim"]), "within": _within(med["real"], med["sim"])}
            if med["stated"] is not None:
                row.update(stated_only=_fmt(med["stated"]), stated_error=_error(med["real"], med["stated"]),
                           stated_within=_within(med["real"], med["stated"]))
            else:
                row.update(stated_only="", stated_error="", stated_within="")
            rows.append(row)
    return rows


def _verdicts(cells, runs) -> list[dict]:
    out = []
    groups = sorted({(c["workers"], c["case"], c["net"]) for c in cells})
    for w, case, net in groups:
        members = [c for c in cells if (c["workers"], c["case"], c["net"]) == (w, case, net)]
        for a, b in itertools.combinations(members, 2):
            for k in VERDICT_QUANTITIES:
                kinds = {}
                for side in SIDES:
                    pa, pb = _by(runs, side, a["cell"]), _by(runs, side, b["cell"])
                    seeds = sorted(set(pa) & set(pb))
                    if len(seeds) < 2:
                        continue
                    va, vb = (Sample.of([p[s]["quantities"][k] for s in seeds],
                                        caps=[p[s]["quantities"]["wall_time_s"] for s in seeds], seeds=seeds)
                              for p in (pa, pb))
                    kinds[side] = judge(va, vb).outcome.value
                if "real" not in kinds or "sim" not in kinds:
                    continue
                out.append({"workers": w, "case": case, "net": net, "quantity": k, "a": a["mode"], "b": b["mode"],
                            "real": kinds["real"], "simulated": kinds["sim"],
                            "agree": "yes" if kinds["real"] == kinds["sim"] else "no",
                            "stated_only": kinds.get("stated", ""),
                            "stated_agree": ("yes" if kinds["real"] == kinds["stated"] else "no")
                            if "stated" in kinds else ""})
    return out


def _score(rows, verdicts, side: str) -> dict:
    from scipy.stats import binomtest  # seconds to import: only the score needs it, not every importer

    within, agree = ("within", "agree") if side == "sim" else ("stated_within", "stated_agree")
    hits = sum(r[within] == "yes" for r in rows)
    counted = sum(r[within] in ("yes", "no") for r in rows)
    agreed = sum(v[agree] == "yes" for v in verdicts)
    judged = sum(v[agree] in ("yes", "no") for v in verdicts)
    ci = binomtest(hits, counted).proportion_ci(0.95, method="exact") if counted else None
    share = f"{hits / counted:.0%} [{ci.low:.0%}, {ci.high:.0%}]" if counted else "none counted"
    return {"hits": hits, "counted": counted, "agreed": agreed, "judged": judged,
            "line": f"{hits} of {counted} quantities within ±{TOLERANCE:.0%} ({share}); "
                    f"{agreed} of {judged} verdicts agree"}


def _markdown(rows, verdicts, head, host, runs, shape, quick) -> str:
    real = [m for m in runs if m["side"] == "real"]
    loads = sorted(m["runnable_p50"] for m in real if m.get("runnable_p50") is not None)
    lines = [f"# Simulated against real: {'the --quick subset' if quick else 'the matrix as run'}", "",
             f"**Simulated, host cost calibrated outside the matrix: {head['sim']['line']}.**", "",
             f"Stated physics only (no calibration at all): {head['stated']['line']}.", "",
             f"Cells {len({r['cell'] for r in rows})}; shaped links {shape.rate_mbit:g} Mb/s per link, "
             f"{shape.latency_ms:g} ms. Medians over the seeds; 'simulated' and 'stated only' are the virtual "
             "cluster's figures (simulated), given testbed.yaml and the stated links; 'simulated' adds the host's "
             "per-message cost"
             + " (" + "; ".join(_host_text(net, [m for m in host if m.get("net", "loopback") == net])
                                for net in dict.fromkeys(m.get("net", "loopback") for m in host)) + ")"
             + ".", ""]
    if loads:
        lines += [f"Real runs: {len(real)}; runnable threads while each trained (median of 0.2 s samples): "
                  f"{loads[0]:g} to {loads[-1]:g}, median {statistics.median(loads):g}.", ""]
    lines += ["| cell | quantity | real | simulated | error | within | stated only | error |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['cell']} | {r['quantity']} | {r['real']} | {r['simulated']} | {r['error']} | {r['within']} "
              f"| {r['stated_only']} | {r['stated_error']} |" for r in rows]
    lines += ["", "| W | case | net | quantity | a vs b | real | simulated | agree | stated only |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {v['workers']} | {v['case']} | {v['net']} | {v['quantity']} | {v['a']} vs {v['b']} | {v['real']} "
              f"| {v['simulated']} | {v['agree']} | {v['stated_only']} |" for v in verdicts]
    return "\n".join(lines) + "\n"


def _host_text(net: str, fits: list[dict]) -> str:
    return (f"{net}: request_us {_mid(fits, 'request_us'):.1f}, latency_us {_mid(fits, 'latency_us'):.1f}, the median "
            f"of {len(fits)} fits by `psgd sim calibrate` on {fits[0]['cell']}, seeds "
            f"{', '.join(str(m['seed']) for m in fits)}, none a matrix cell; each fit (request / latency us at the "
            "runnable threads while it trained): "
            + ", ".join(f"{m['fitted']['request_us']:.0f} / {m['fitted']['latency_us']:.0f} at {m['runnable_p50']}"
                        for m in fits))


def _mid(fits: list[dict], key: str) -> float:
    return statistics.median(m["fitted"][key] for m in fits)


def _error(real, sim) -> str:
    if real is None or sim is None or math.isinf(real) or math.isinf(sim) or real == 0:
        return ""
    return f"{sim / real - 1:+.1%}"


def _within(real, sim) -> str:
    """yes / no; 'not counted' where neither side reached the target (that cannot fail)."""
    if math.isinf(real) and math.isinf(sim):
        return "not counted"
    if math.isinf(real) or math.isinf(sim):
        return "no"
    return "yes" if abs(sim - real) <= TOLERANCE * abs(real) else "no"


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isinf(v)):
        return "not reached"
    return f"{v:.4g}"
