"""Markdown reports and PNG plots (matplotlib, the `bench` extra) for `psgd bench comm`,
`psgd bench apply` and `psgd bench scale`, written from their result dicts.

Every figure in a report comes from the result it is given; the command that
produced the result is written at the top so the report can be remade.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from psgd.bench.pyplot import pyplot

__all__ = ["write_apply_report", "write_scale_report"]  # comm: psgd.bench.comm_report


def _header(title: str, command: str, result: dict) -> list[str]:
    return [f"# {title}", "", "Produced by:", "", "```", command, "```", "",
            f"Machine: {os.cpu_count()} cores, 1-minute load average at the end "
            f"{result.get('load_avg_end', os.getloadavg()[0]):.1f} (the machine is shared; medians of repeated runs, ratios from one run).", ""]


def _save_figure(plt, fig, out: Path, png: str, alt: str, lines: list[str]) -> None:
    """Write the figure as `png` in `out` and link it from the report lines."""
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / png, dpi=110)
    plt.close(fig)
    lines += ["", f"![{alt}]({png})"]


def _save(out: Path, result: dict, lines: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def _mb(n: int) -> str:
    return f"{n / (1 << 20):g} MB"


def write_apply_report(result: dict, out: Path, command: str) -> None:
    plt = pyplot()
    rows = result["rows"]
    lines = _header("psgd bench apply: server update throughput per shard", command, result)
    lines += ["`ShardState.push` on one thread: bookkeeping, non-finite check and the in-place update.", "",
              "| optimizer | gradient | median ms | GB/s of fp32 gradient |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['optimizer']} | {_mb(r['size_bytes'])} | {r['median_ms']:.3f} | {r['gb_per_s']:.2f} |")
    lines += ["", "The non-finite guard (`ShardUpdater.apply_if_finite`), timed side by side with the update in the "
              "thread's CPU time: "
              "`update` is the rule alone, `checked` the update behind the gradient's finiteness check every push "
              "had before the guard, `guarded` what a shard runs now; the guard's cost is guarded − checked. The three "
              "run in turn, each round starting with the next one.", "",
              "| optimizer | gradient | update ms | checked ms | guarded ms | guard ms | guard / update | copied |",
              "|---|---|---|---|---|---|---|---|"]
    for g in result.get("guard", []):
        lines.append(f"| {g['optimizer']} | {_mb(g['size_bytes'])} | {g['update_ms']:.3f} | {g['checked_update_ms']:.3f}"
                     f" | {g['guarded_update_ms']:.3f} | {g['guard_ms']:+.3f} | {g['guard_share_of_update']:+.1%}"
                     f" | {'yes' if g['copies'] else 'no'} |")
    fig, ax = plt.subplots(figsize=(6, 4))
    for opt in dict.fromkeys(r["optimizer"] for r in rows):
        pts = [r for r in rows if r["optimizer"] == opt]
        ax.plot([r["size_bytes"] / (1 << 20) for r in pts], [r["gb_per_s"] for r in pts], "o-", label=opt)
    ax.set_xscale("log")
    ax.set_xlabel("gradient size (MB)")
    ax.set_ylabel("GB/s applied")
    ax.legend()
    ax.grid(True, alpha=0.3)
    _save_figure(plt, fig, out, "apply_throughput.png", "apply throughput", lines)
    _save(out, result, lines)


def _per_request_ms(r: dict) -> float:
    return r["shard_cpu_cores"] / r["updates_per_s"] * 1e3 if r["updates_per_s"] else float("nan")


def _cause(p: dict, busy: float, cores: int) -> str:
    """Which resource ran out at a saturation point, read off its CPU figures."""
    if p["shard_cpu_cores"] >= 0.8:
        return ("Cause: the shard's own CPU: it is single-threaded and was busy almost all the time, so "
                "requests queued in front of it.")
    if busy >= 0.8 * cores:
        return ("Cause: the machine's cores: shards and light workers together used nearly all of them, so "
                "adding workers only added queueing.")
    if p["load_avg_1m"] > cores:
        return (f"Cause: CPU contention from other processes on the machine: this benchmark got only "
                f"{busy:.2f} of {cores} cores while the load average was {p['load_avg_1m']}, so its shard and "
                "workers waited to be scheduled rather than for each other.")
    return "Cause: not CPU (none of it was busy): latency, not throughput, limited this point."


def write_scale_report(result: dict, out: Path, command: str) -> None:
    plt = pyplot()
    rows = result["rows"]
    lines = _header("psgd bench scale: light workers against 1, 2 and 4 shards", command, result)
    lines += [f"Each light worker sleeps {result['compute_ms']:g} ms (simulated compute), then pushes and pulls "
              f"a {result['grad_bytes'] // 1024} KB fp32 gradient split over the shards (ASP). "
              f"Workers run as threads in {result['processes']} processes; each point is counted over "
              f"a {result['window_s']:g} s window. 'ideal' is workers / compute time (zero-cost round trips). "
              "CPU columns are cores busy during the window (1.0 = one full core), from /proc.", "",
              "'shard CPU ms per request' = a shard's CPU time / the requests it served "
              "(each update is one request to every shard).", "",
              "'path' is the data path: auto = shared memory between same-host workers and shards, off = TCP.", "",
              "| shards | workers | path | updates/s | ideal | pull latency median ms | p95 ms | CPU per shard | "
              "shard CPU ms per request | CPU all workers | load avg |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shards']} | {r['workers']} | {r.get('shared_memory', 'auto')} | "
                     f"{r['updates_per_s']:.0f} | {r['ideal_updates_per_s']:.0f} | "
                     f"{r['pull_latency_ms_median']} | {r['pull_latency_ms_p95']} | {r['shard_cpu_cores']:.2f} | "
                     f"{_per_request_ms(r):.3f} | {r['worker_cpu_cores']:.2f} | {r['load_avg_1m']} |")
    speedups = result.get("path_speedups") or []
    if speedups:
        lines += ["", "## Shared memory against TCP, measured back to back at each point", "",
                  "| shards | workers | updates/s shared memory | updates/s TCP | ratio | repeats |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {p['shards']} | {p['workers']} | {p['auto_updates_per_s']:.0f} | {p['off_updates_per_s']:.0f} | "
                  f"{p['auto_over_off']} | {p['repeats']} |" for p in speedups]
    lines += ["", "## Where a shard saturates", ""]
    cores = result.get("cores") or os.cpu_count()
    for s, sat in result["saturation"].items():
        p = sat["point"]
        if p is None:
            lines.append(f"- {s} shard(s): updates/s stayed within 80% of linear scaling up to "
                         f"{sat.get('max_workers')} workers "
                         f"(peak {sat['peak_updates_per_s']:.0f}/s).")
            continue
        busy = p["shard_cpu_cores"] * p["shards"] + p["worker_cpu_cores"]
        lines.append(
            f"- {s} shard(s): falls below 80% of linear scaling at **{p['workers']} workers** "
            f"({p['updates_per_s']:.0f} updates/s against an ideal {p['ideal_updates_per_s']:.0f}); peak "
            f"{sat['peak_updates_per_s']:.0f}/s at {sat['peak_workers']} workers. There, each shard kept "
            f"{p['shard_cpu_cores']:.2f} of a core busy and the light workers {p['worker_cpu_cores']:.2f} cores, "
            f"{busy:.2f} of the machine's {cores} cores in all (1-minute load average {p['load_avg_1m']}), "
            f"and the median pull latency was {p['pull_latency_ms_median']} ms. A shard spent "
            f"{_per_request_ms(p):.3f} ms of CPU per request, so with a whole core to itself it could serve at "
            f"most ~{1e3 / _per_request_ms(p):.0f} requests/s. " + _cause(p, busy, cores))
    lines += ["", "How to read it: a shard serves requests one at a time on one Python thread, so its rate is "
              "capped at 1 / (CPU time per request); once the offered load (workers / compute time) passes that "
              "cap, requests queue at the shard and pull latency grows with the number of workers while "
              "updates/s stay flat. A shard CPU column near 1.0 means the shard itself is the bottleneck; a "
              "lower value with shards + workers near the core count means the machine's cores (shared by the "
              "shards, the light workers and other users' processes) ran out first, and more shards cannot help "
              "because every push+pull visits every shard."]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    paths = sorted({r.get("shared_memory", "auto") for r in rows})
    for s in sorted({r["shards"] for r in rows}):
        for path in paths:
            by_workers: dict[int, list[dict]] = {}
            for r in rows:
                if r["shards"] == s and r.get("shared_memory", "auto") == path:
                    by_workers.setdefault(r["workers"], []).append(r)
            if not by_workers:
                continue
            w = sorted(by_workers)
            label = f"{s} shard{'s' if s > 1 else ''}" + (f" ({path})" if len(paths) > 1 else "")
            axes[0].plot(w, [max(x["updates_per_s"] for x in by_workers[k]) for k in w], "o-", label=label)
            lat = [min((x["pull_latency_ms_median"] for x in by_workers[k] if x["pull_latency_ms_median"] is not None),
                       default=float("nan")) for k in w]
            axes[1].plot(w, lat, "o-", label=label)
    ideal = sorted({(r["workers"], r["ideal_updates_per_s"]) for r in rows})
    axes[0].plot([i[0] for i in ideal], [i[1] for i in ideal], "k:", label="ideal (workers / compute)")
    for ax, ylabel in ((axes[0], "updates/s"), (axes[1], "median push+pull latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("light workers")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    _save_figure(plt, fig, out, "scale.png", "scale", lines)
    _save(out, result, lines)
