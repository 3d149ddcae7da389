"""The `psgd bench comm` report: several runs combined (medians of each
figure over the runs, every run's ratios kept), the one-host table with
psgd's shared-memory and TCP paths against the floors and the peers, and the
cross-host rows. Measurements and ratios only: the project's own targets for
them are checked by benchmarks/check_targets.py, not here.

Every ratio comes from one run's side-by-side medians; the combined table
takes, per figure, the median over runs of those per-run values.
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

from psgd.bench.pyplot import pyplot

__all__ = ["combine_runs", "write_comm_report"]


def _mb(n: int) -> str:
    return f"{n / (1 << 10):g} KB" if n < 1 << 20 else f"{n / (1 << 20):g} MB"


def _key(row: dict) -> tuple:
    return row.get("where", "host"), row["size_bytes"], row["shards"]


def _median_rows(rows: list[dict]) -> dict:
    """Per key, the median over runs of numeric values (None where any run has none)."""
    out = dict(rows[0])
    for k, v in rows[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("size_bytes", "shards", "repeats"):
            vals = [r.get(k) for r in rows]
            out[k] = None if any(x is None for x in vals) else round(statistics.median(vals), 4)
    out["runs"] = len(rows)
    return out


def combine_runs(results: list[dict]) -> dict:
    """One result from several `run_comm_bench` results: rows are the per-figure
    medians over the runs; `per_run` keeps each run's rows."""
    combined = {"rows": [], "cross_host": [], "per_run": results, "runs": len(results)}
    for part in ("rows", "cross_host"):
        groups: dict[tuple, list[dict]] = {}
        for res in results:
            for row in res.get(part, []):
                groups.setdefault(_key(row), []).append(row)
        combined[part] = [_median_rows(g) for g in groups.values()]
    first = results[0]
    for k in ("repeats", "warmup", "torch", "cross_host_skipped"):
        combined[k] = first.get(k)
    combined["ray"] = "; ".join(dict.fromkeys(str(r.get("ray")) for r in results))
    combined["load_avg_end"] = results[-1].get("load_avg_end")
    combined["load_avg_max"] = max(r.get("load_avg_max", 0) for r in results)
    return combined


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.3f}"


def _where_time_goes(rows: list[dict]) -> list[str]:
    """psgd's shared-memory round trip split into the in-process floor (the
    copies, the check and the step on one core), what splitting it over two
    processes woken by a pipe adds (psgd's doorbell is such a pipe), and what
    psgd's protocol adds on top; beside them, what waking over ZeroMQ instead
    of the pipe would add (psgd's wake-up before it had doorbells)."""
    keys = ("shm_floor_inproc_ms", "shm_floor_ms", "shm_zmq_floor_ms")
    split = [r for r in rows if r["shards"] == 1 and (r.get("psgd_shm_ms") or r.get("shared_memory"))
             and None not in (r.get(k) for k in keys)]
    if not split:
        return []
    out = ["", "### Where psgd's shared-memory round trip goes (one shard, ms)", "",
           "| size | in-process floor (copies, check, step) | + a second process woken by a pipe | "
           "+ psgd's protocol | = psgd with shared memory | a ZeroMQ wake instead of the pipe would add |",
           "|---|---|---|---|---|---|"]
    for r in split:
        inproc, pipe, zmq_wake = (r[k] for k in keys)
        psgd = r.get("psgd_shm_ms") or r["psgd_ms"]
        out.append(f"| {_mb(r['size_bytes'])} | {inproc:.3f} | {pipe - inproc:+.3f} | {psgd - pipe:+.3f} | "
                   f"{psgd:.3f} | {zmq_wake - pipe:+.3f} |")
    return out


def _host_tables(rows: list[dict]) -> list[str]:
    """The one-host round trips (ms), then psgd's ratios to each of them."""
    ms = (("psgd_ms", "psgd (default)"), ("psgd_shm_ms", "psgd, shared memory at any size"),
          ("psgd_tcp_ms", "psgd TCP"), ("raw_zmq_ms", "raw ZeroMQ"), ("raw_zmq_sgd_ms", "ZeroMQ floor"),
          ("shm_floor_ms", "shm floor"), ("shm_zmq_floor_ms", "shm floor, ZeroMQ wake"),
          ("shm_floor_inproc_ms", "shm floor in-process"), ("torch_rpc_ms", "torch.rpc"), ("ray_ms", "Ray"),
          ("gloo_ms", "gloo"))
    ratios = (("psgd_over_psgd_tcp", "psgd / psgd TCP"), ("psgd_shm_over_psgd_tcp", "psgd shm / psgd TCP"),
              ("psgd_over_shm_floor_inproc", "psgd / shm floor in-process"),
              ("psgd_over_shm_floor", "psgd / shm floor"), ("psgd_over_shm_zmq_floor", "psgd / shm floor, ZeroMQ wake"),
              ("psgd_over_raw_zmq_sgd", "psgd / ZeroMQ floor"), ("psgd_tcp_over_raw_zmq_sgd", "psgd TCP / ZeroMQ floor"),
              ("psgd_over_torch_rpc", "psgd / torch.rpc"), ("psgd_over_ray", "psgd / Ray"))
    lines = ["| size | shards | shm | " + " | ".join(f"{label} ms" for _, label in ms) + " |",
             "|---|---|---|" + "---|" * len(ms)]
    lines += [f"| {_mb(r['size_bytes'])} | {r['shards']} | {'yes' if r.get('shared_memory') else 'no'} | "
              + " | ".join(_fmt(r.get(k)) for k, _ in ms) + " |" for r in rows]
    lines += ["", "| size | shards | " + " | ".join(label for _, label in ratios) + " |",
              "|---|---|" + "---|" * len(ratios)]
    lines += [f"| {_mb(r['size_bytes'])} | {r['shards']} | " + " | ".join(_fmt(r.get(k)) for k, _ in ratios) + " |"
              for r in rows]
    return lines


def write_comm_report(result: dict, out: Path, command: str) -> None:
    """report.md, results.json and round_trip.png in `out` from a (combined) result."""
    import json
    if "per_run" not in result:
        result = combine_runs([result])
    rows, cross = result["rows"], result["cross_host"]
    runs = result["runs"]
    lines = ["# psgd bench comm: push+pull round trip", "", "Produced by:", "", "```", command, "```", "",
             f"Machine: {os.cpu_count()} cores, shared with other users; 1-minute load average up to "
             f"{result['load_avg_max']:.1f} during the runs, {result['load_avg_end']:.1f} at the end.", "",
             f"Each figure is the median over {runs} run(s) of that run's median of {result['repeats']} round trips "
             f"(after {result['warmup']} warm-up). Within a run, psgd (default: shared memory when the shard is "
             "on the same host and holds at least `wire.shared_memory_min_bytes`), psgd with shared memory at "
             "any size (that threshold at 0), psgd with `wire.shared_memory: off` (TCP), the raw ZeroMQ echo, the "
             "raw ZeroMQ check+SGD floor and the three shared-memory floors alternate one round trip each (in an "
             "order shuffled afresh every iteration), so noise hits all of them alike; every ratio is taken "
             "within one run. gloo, torch.rpc and the Ray actor PS run in process pairs of their own in the same "
             "run.", "",
             "- raw ZeroMQ check+SGD floor: a bare ROUTER that checks the gradient is finite, applies "
             "`p -= lr*g` and replies with `p`, zero-copy; no protocol.",
             "- shared-memory floor: the gradient copied into a segment, a server process woken by one byte on a "
             "pipe copies it out into a buffer of its own, checks that copy, applies SGD from it and copies `p` "
             "into the reply region; no protocol. "
             "psgd wakes its same-host shard the same way: a shared-memory connection's headers travel over "
             "a pair of pipes (its doorbell), everything else over ZeroMQ. "
             "The ZeroMQ-woken variant wakes the server with one empty ZeroMQ message each way instead of the "
             "pipe byte: the least any server can do that keeps requests and replies on ZeroMQ and moves only "
             "the tensors through shared memory (psgd before doorbells). "
             "The in-process variant does the same work on one core with no wake-up: a bound below any "
             "cross-process server.",
             f"- Ray actor PS: {result.get('ray')}.", "",
             "## One host", ""]
    lines += _host_tables(rows)
    lines += _where_time_goes(rows)
    lines += ["", "## Across hosts (two network namespaces joined by veth, TCP)", ""]
    if cross:
        lines += ["| size | shm | psgd ms | ZeroMQ floor ms | psgd / ZeroMQ floor |", "|---|---|---|---|---|"]
        lines += [f"| {_mb(r['size_bytes'])} | {'yes' if r['shared_memory'] else 'no'} | {_fmt(r['psgd_ms'])} | "
                  f"{_fmt(r['raw_zmq_sgd_ms'])} | {_fmt(r['psgd_over_raw_zmq_sgd'])} |" for r in cross]
    else:
        lines.append(f"Not measured: {result.get('cross_host_skipped')}.")
    if runs > 1:
        lines += ["", "## Every run's ratios", "", "| run | size | psgd / psgd TCP | psgd / shm floor in-process | "
                  "psgd / shm floor | psgd / ZeroMQ floor | psgd / torch.rpc | psgd / Ray | load avg |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for i, res in enumerate(result["per_run"], 1):
            for r in res["rows"]:
                if r["shards"] == 1:
                    lines.append(f"| {i} | {_mb(r['size_bytes'])} | {_fmt(r.get('psgd_over_psgd_tcp'))} | "
                                 f"{_fmt(r.get('psgd_over_shm_floor_inproc'))} | {_fmt(r.get('psgd_over_shm_floor'))} | "
                                 f"{_fmt(r['psgd_over_raw_zmq_sgd'])} | {_fmt(r.get('psgd_over_torch_rpc'))} | "
                                 f"{_fmt(r.get('psgd_over_ray'))} | {res.get('load_avg_max')} |")
            for r in res.get("cross_host", []):
                lines.append(f"| {i} | {_mb(r['size_bytes'])} across hosts | — | — | — | "
                             f"{_fmt(r['psgd_over_raw_zmq_sgd'])} | — | — | {res.get('load_avg_max')} |")
    out.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    one = [r for r in rows if r["shards"] == 1]
    xs = [r["size_bytes"] / (1 << 20) for r in one]
    for key, label in (("psgd_ms", "psgd (default)"), ("psgd_shm_ms", "psgd (shared memory at any size)"),
                       ("psgd_tcp_ms", "psgd (TCP)"), ("shm_floor_ms", "shared-memory floor"),
                       ("shm_floor_inproc_ms", "shared-memory floor, in-process"), ("raw_zmq_sgd_ms", "ZeroMQ check+SGD floor"),
                       ("torch_rpc_ms", "torch.rpc PS"), ("ray_ms", "Ray actor PS"), ("gloo_ms", "gloo all-reduce")):
        ys = [r.get(key) for r in one]
        if all(y is not None for y in ys):
            ax.plot(xs, ys, "o-" if key.startswith("psgd") else "s--", label=label)
    if cross:
        ax.plot([r["size_bytes"] / (1 << 20) for r in cross], [r["psgd_ms"] for r in cross], "^-",
                label="psgd across namespaces")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("payload per direction (MB)")
    ax.set_ylabel("median round trip (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "round_trip.png", dpi=110)
    plt.close(fig)
    lines += ["", "![round trip](round_trip.png)"]
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "report.md").write_text("\n".join(lines) + "\n")
