"""Where one small request's CPU goes, on the shard and on the client, before and after a change.

One real shard (psgd.servers.shard.ShardServer, its own spawned process, one torch thread) and
one real PSClient (this process) on loopback do `--requests` push+pulls of a fixed gradient
(the path `psgd bench scale` uses: a same-host segment and doorbell where the shard takes them).
Each side's CPU time per request is its serving or requesting thread's own CPU time
(time.thread_time_ns, wall time never), with the process's total beside it (the ZeroMQ I/O
thread included). A second pass runs both under cProfile (timer: the thread's CPU time) and
splits that CPU time into phases by function (PHASES below), each function's own time going to
the phase of the nearest enclosing function the table names, shared among its callers in
proportion to what each caller spent in it. The shares come from the profiled pass, the
totals from the unprofiled one.

`--before REV` runs the same points against the tree of git revision REV (extracted to a
temporary folder, imported in place of this checkout), in the same run, interleaved point by
point, so load on the machine falls on both sides alike. Figures measured on a loaded machine
say so: every point records the 1-minute load average.

    python benchmarks/shard-cpu/shard_cpu.py --before 9ee49b6 --out benchmarks/shard-cpu
"""
from __future__ import annotations

import argparse
import cProfile
import faulthandler
import json
import multiprocessing as mp
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (file suffix, function name) -> phase. A function not named here counts toward the phase of
# the nearest function above it that is (through its callers).
SHARD_PHASES = {
    ("psgd/wire/transport.py", "recv"): "receive",  # before the transport became a package
    ("psgd/wire/transport/sockets.py", "recv"): "receive",
    ("psgd/wire/transport/sockets.py", "recv_batch"): "receive",  # the shard's loop since it drains in batches
    ("psgd/wire/protocol.py", "decode"): "header decode",
    ("servers/shard.py", "handle"): "validation",
    ("servers/shard.py", "_peer"): "validation",  # older trees: the peer check's wrapper
    ("servers/peers.py", "check_worker"): "validation",
    ("servers/service.py", "check_push"): "validation",
    ("servers/state.py", "check_push"): "validation",
    ("psgd/wire/protocol.py", "is_piece"): "validation",
    ("servers/shard.py", "_gradient"): "payload decode",
    ("psgd/core/rules/updater.py", "apply_if_finite"): "apply",
    ("psgd/core/rules/updater.py", "abs_max"): "apply",
    ("servers/state.py", "_writable"): "apply",
    ("servers/shard.py", "serve"): "bookkeeping",
    ("servers/shard.py", "_on_push"): "bookkeeping",
    ("servers/shard.py", "_journal"): "bookkeeping",
    ("servers/shard.py", "_send"): "reply",
    ("servers/shard.py", "_reply"): "reply",
    ("servers/shard.py", "_send_params"): "reply",
    ("servers/param_replies.py", "answer"): "reply",
}
CLIENT_PHASES = {
    ("workers/client.py", "start"): "header build",
    ("workers/request.py", "_record"): "header build",  # before push headers were packed from their values
    ("workers/request.py", "_encode"): "header build",
    ("psgd/wire/protocol.py", "encode_push"): "header build",
    ("workers/request.py", "encode"): "encode",
    ("psgd/wire/protocol.py", "encode"): "header build",
    ("psgd/wire/shm/links.py", "generation"): "payload into segment",
    ("psgd/wire/transport.py", "send"): "send (doorbell)",  # before the transport became a package
    ("psgd/wire/transport.py", "recv"): "wait and receive",
    ("psgd/wire/transport/sockets.py", "send"): "send (doorbell)",
    ("psgd/wire/transport/sockets.py", "recv"): "wait and receive",
    ("psgd/wire/protocol.py", "decode"): "reply decode",
    ("psgd/wire/requests.py", "wait"): "reply decode",
    ("workers/client.py", "_param"): "reply decode",
    ("workers/client.py", "_settle"): "bookkeeping",
    ("workers/client.py", "wait"): "bookkeeping",
    ("workers/client.py", "push_pull"): "bookkeeping",
    ("psgd/wire/requests.py", "start"): "bookkeeping",
    ("<profile>", "copy_into_model"): "copy into the model",
}
SHARD_ORDER = ["receive", "header decode", "validation", "payload decode", "apply", "bookkeeping", "reply"]
CLIENT_ORDER = ["header build", "encode", "payload into segment", "send (doorbell)", "wait and receive",
                "reply decode", "copy into the model", "bookkeeping"]


def _key(func: tuple) -> tuple[str, str]:
    filename, _line, name = func
    for top in ("servers/", "workers/", "psgd/"):  # a role folder first: an extracted tree has psgd/servers/
        at = filename.rfind("/" + top)
        if at >= 0:
            return filename[at + 1:], name
    return filename, name


def phase_shares(stats: pstats.Stats, table: dict, fallback: str) -> dict[str, float]:
    """Each phase's fraction of the profiled CPU time (see the module docstring)."""
    data = stats.stats  # func -> (cc, nc, tottime, cumtime, callers{caller: (cc, nc, tt, ct)})
    split: dict = {}  # func -> {phase: fraction of its own time}, worked out once per function

    def phases_of(func) -> dict[str, float]:
        if func in split:
            return split[func]
        phase = table.get(_key(func))
        if phase is None and func[0] == __file__:
            phase = table.get(("<profile>", func[2]))
        callers = data[func][4] if func in data else {}
        if phase is not None or not callers:
            split[func] = {phase or fallback: 1.0}
            return split[func]
        split[func] = {fallback: 1.0}  # a recursion back here (a cycle) counts as the fallback
        weight = 2 if sum(c[2] for c in callers.values()) > 0 else 1  # time in it from each caller, else calls
        total = sum(c[weight] for c in callers.values())
        mix: dict[str, float] = {}
        for caller, c in callers.items():
            for p, f in phases_of(caller).items():
                mix[p] = mix.get(p, 0.0) + f * c[weight] / total
        split[func] = mix
        return mix

    out: dict[str, float] = {}
    for func, (_cc, _nc, tottime, _ct, _callers) in data.items():
        for p, f in phases_of(func).items():
            out[p] = out.get(p, 0.0) + tottime * f
    whole = sum(out.values()) or 1.0
    return {k: v / whole for k, v in out.items()}


# ---- one point, in a fresh interpreter importing the tree under test ---------------------------------
def _config(mode: str, workers: int):
    from psgd.config import load_config
    over = [f"cluster.workers={workers}", f"consistency.mode={mode}", "optimizer.name=sgd", "optimizer.lr=0.000001",
            "cluster.timeout_s=600", "cluster.heartbeat_s=100"]
    return load_config(None, over + (["consistency.staleness=2"] if mode == "ssp" else []))


def _shard(numel: int, mode: str, workers: int, profile: bool, conn, prof_file: str) -> None:
    import torch
    torch.set_num_threads(1)
    from psgd.bench.procs import bench_layout, process_cpu_s
    from psgd.servers.shard import ShardServer
    server = ShardServer(_config(mode, workers), 0, "127.0.0.1:0", torch.zeros(numel),
                         bench_layout(numel, 1).fingerprint, run_token="profile")
    conn.send(server.address.replace("tcp://", ""))
    serving = time.pthread_getcpuclockid(threading.main_thread().ident)
    marks = []

    def mark() -> None:  # at each of the client's marks: the serving thread's CPU and the requests it served
        marks.append((server._served, time.clock_gettime_ns(serving), process_cpu_s(os.getpid())))

    def watch() -> None:
        while conn.recv() == "mark":
            mark()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # The profile covers the whole serve (registration and warm-up too): it gives shares, not totals.
    prof = cProfile.Profile(time.thread_time) if profile else None
    if prof is not None:
        prof.enable()
    server.serve(threading.Event())  # until the client's SHUTDOWN
    if prof is not None:
        prof.disable()
        prof.dump_stats(prof_file)
    watcher.join()  # the client's last mark may still be on its way when its SHUTDOWN has stopped the loop
    conn.send({"windows": [{"requests": b[0] - a[0], "thread_ns": b[1] - a[1], "process_s": b[2] - a[2]}
                           for a, b in zip(marks, marks[1:])], "served": server._served})


def copy_into_model(model, params) -> None:
    """What the worker's model sync does with a reply: copy the parameters into the model's own tensor."""
    model.copy_(params)


def run_point(nbytes: int, mode: str, requests: int, repeats: int, profile: bool, workdir: str,
              pace_ms: float = 0.0, workers: int = 1) -> dict:
    """`repeats` windows of `requests` push+pulls against one shard: the medians of their per-request CPU.
    `pace_ms`: the client sleeps this long before each request (a light worker's simulated compute: the
    shard's idle loop between requests is then in its CPU per request); `workers`: cluster.workers of the
    shard's config (psgd bench scale's shard is configured for its largest point)."""
    import torch
    torch.set_num_threads(1)
    from psgd.bench.procs import bench_layout, process_cpu_s
    from psgd.workers.client import PSClient
    numel = nbytes // 4
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    prof_file = os.path.join(workdir, "shard.prof")
    proc = ctx.Process(target=_shard, args=(numel, mode, workers, profile, child, prof_file), daemon=True)
    proc.start()
    address = parent.recv()
    layout = bench_layout(numel, 1)
    client = PSClient([address], layout, rank=0, heartbeat_s=None, token="profile", request_timeout_s=60,
                      max_retries=0)
    windows = []
    try:
        client.register()
        grads, model = [torch.randn(numel) * 1e-3], torch.zeros(numel)
        for _ in range(min(200, requests)):  # warm up: buffers, views, caches
            copy_into_model(model, client.push_pull(grads)[0])
        prof = cProfile.Profile(time.thread_time) if profile else None
        for _ in range(repeats):
            parent.send("mark")
            thread0, proc0 = time.thread_time_ns(), process_cpu_s(os.getpid())
            if prof is not None:
                prof.enable()
            for _ in range(requests):
                if pace_ms:
                    time.sleep(pace_ms / 1e3)
                copy_into_model(model, client.push_pull(grads)[0])
            if prof is not None:
                prof.disable()
            windows.append({"client_ns": time.thread_time_ns() - thread0,
                            "client_process_s": process_cpu_s(os.getpid()) - proc0})
        parent.send("mark")
        shm = client.shared_memory[0]
        client.shutdown_servers(token="profile")
        parent.send("end")
    finally:
        client.close()
    got = parent.recv()
    shard, served = got["windows"], got["served"]
    proc.join(timeout=30)

    def median(values):
        values = sorted(values)
        return values[len(values) // 2]

    out = {"bytes": nbytes, "mode": mode, "requests": requests, "repeats": repeats, "shared_memory": shm,
           "shard_us_per_request": round(median(w["thread_ns"] / 1e3 / w["requests"] for w in shard), 2),
           "shard_process_us_per_request": round(median(w["process_s"] * 1e6 / w["requests"] for w in shard), 2),
           "client_us_per_request": round(median(w["client_ns"] / 1e3 / requests for w in windows), 2),
           "client_process_us_per_request": round(median(w["client_process_s"] * 1e6 / requests for w in windows), 2),
           "load_avg_1m": round(os.getloadavg()[0], 2)}
    if profile:
        shard_stats, client_stats = pstats.Stats(prof_file), pstats.Stats(prof)
        out["shard_shares"] = phase_shares(shard_stats, SHARD_PHASES, "bookkeeping")
        out["client_shares"] = phase_shares(client_stats, CLIENT_PHASES, "bookkeeping")
        # Python function calls per request: what the interpreter runs, whatever the machine's load.
        # The shard's profile covers its whole serve (registration and warm-up too), so over every request.
        out["shard_calls_per_request"] = round(shard_stats.total_calls / served, 1)
        out["client_calls_per_request"] = round(client_stats.total_calls / (requests * repeats), 1)
    return out


# ---- the driver -----------------------------------------------------------------------------------------
def extract(rev: str, into: Path) -> Path:
    """The tree of `rev`, importable as psgd (its servers/ and workers/ linked inside psgd/)."""
    into.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    for role in ("servers", "workers"):
        os.symlink(into / role, into / "psgd" / role)
    return into


def measure(tree: Path, nbytes: int, mode: str, requests: int, repeats: int, profile: bool, pace_ms: float = 0.0,
            workers: int = 1) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory(prefix="psgd-shard-cpu-") as work:
        point = f"{nbytes},{mode},{requests},{repeats},{int(profile)},{work},{pace_ms},{workers}"
        args = [sys.executable, __file__, "--point", point]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, cwd=work)
        if done.returncode != 0:
            raise RuntimeError(f"point {nbytes} {mode} failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def parse_size(text: str) -> int:
    t = text.strip().upper()
    for suffix, mult in (("MB", 1 << 20), ("KB", 1 << 10)):
        if t.endswith(suffix):
            return int(float(t[:-2]) * mult)
    return int(t)


def label(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="4KB,64KB,1MB")
    ap.add_argument("--modes", default="asp,ssp")
    ap.add_argument("--requests", type=int, default=3000, help="timed push+pulls per point (unprofiled pass)")
    ap.add_argument("--profile-requests", type=int, default=1000, help="push+pulls of the profiled pass")
    ap.add_argument("--repeats", type=int, default=3, help="timed windows per point and side (median kept)")
    ap.add_argument("--before", default=None, help="git revision to measure beside this checkout")
    ap.add_argument("--after", default=None, help="git revision to measure as 'after' (default: this checkout)")
    ap.add_argument("--pace-ms", type=float, default=0.0,
                    help="the client sleeps this long before each request (psgd bench scale's light worker: 20)")
    ap.add_argument("--workers", type=int, default=1, help="cluster.workers of the shard's config")
    ap.add_argument("--out", default=None, help="folder for results.json and report.md")
    ap.add_argument("--point", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.point:
        faulthandler.dump_traceback_later(600, exit=True)  # a point that hangs says where
        nbytes, mode, requests, repeats, profile, work, pace_ms, workers = args.point.split(",")
        print(json.dumps(run_point(int(nbytes), mode, int(requests), int(repeats), profile == "1", work,
                                   float(pace_ms), int(workers))))
        return
    tmp = Path(tempfile.mkdtemp(prefix="psgd-trees-"))
    try:
        trees = {"after": extract(args.after, tmp / "after") if args.after else REPO}
        if args.before:
            trees = {"before": extract(args.before, tmp / "before"), **trees}
        rows = []
        for nbytes in [parse_size(s) for s in args.sizes.split(",")]:
            for mode in args.modes.split(","):
                for side, tree in trees.items():
                    row = measure(tree, nbytes, mode, args.requests, args.repeats, False, args.pace_ms, args.workers)
                    prof = measure(tree, nbytes, mode, args.profile_requests, 1, True, args.pace_ms, args.workers)
                    row.update(side=side, shard_shares=prof["shard_shares"], client_shares=prof["client_shares"],
                               shard_calls_per_request=prof["shard_calls_per_request"],
                               client_calls_per_request=prof["client_calls_per_request"])
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if not k.endswith("shares")}), flush=True)
                    if args.out:  # after every point: an interrupted run keeps what it measured
                        write(Path(args.out), {
                            "before": args.before, "after": args.after or "the checkout", "requests": args.requests,
                            "repeats": args.repeats, "profile_requests": args.profile_requests,
                            "cores": os.cpu_count(), "rows": rows,
                            "command": "python benchmarks/shard-cpu/shard_cpu.py " + " ".join(sys.argv[1:])})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "report.md").write_text(report(result))


def report(result: dict) -> str:
    rows = result["rows"]
    loads = [r["load_avg_1m"] for r in rows]
    lines = ["# CPU per small request: shard and client, by phase", "",
             "Produced by:", "", "```", result["command"], "```", "",
             f"Machine: {result['cores']} cores; 1-minute load average during the points "
             f"{min(loads):.1f}-{max(loads):.1f}. CPU time, not wall time, is measured, but load still inflates it "
             "(shared caches and cores): the two sides of a point ran back to back, each with its own load average "
             "in the table; a ratio between sides whose load differs much says as much about the load as the code.",
             "",
             "One shard process and one client on loopback, push+pull of an fp32 gradient with plain SGD, "
             f"{result['requests']} timed requests per window, median of the windows. 'shard us' is the serving "
             "thread's CPU per request (its loop included), 'process' adds the ZeroMQ I/O thread; 'client us' is "
             "the requesting thread's CPU per push+pull, copying the reply into a model tensor included. "
             "Phase shares are from a separate cProfile pass "
             f"({result['profile_requests']} requests, the thread's CPU time as its timer) applied to the "
             "unprofiled total; cProfile charges every Python call alike, so the shares lean toward call-heavy "
             "phases.", ""]
    sides = sorted({r["side"] for r in rows}, reverse=True)
    lines += ["## Totals", "",
              "'calls' are Python function calls per request from the profiled pass (the shard's over every "
              "request it served, its idle loop included): unlike the times, the machine's load does not move them.",
              "",
              "| size | mode | side | shared memory | shard us/request | shard process us | shard calls | "
              "client us/request | client process us | client calls | load avg |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {label(r['bytes'])} | {r['mode']} | {r['side']} | {r['shared_memory']} | "
                     f"{r['shard_us_per_request']} | {r['shard_process_us_per_request']} | "
                     f"{r.get('shard_calls_per_request', '')} | {r['client_us_per_request']} | "
                     f"{r['client_process_us_per_request']} | {r.get('client_calls_per_request', '')} | "
                     f"{r['load_avg_1m']} |")
    for who, order, key, total in (("Shard", SHARD_ORDER, "shard_shares", "shard_us_per_request"),
                                   ("Client", CLIENT_ORDER, "client_shares", "client_us_per_request")):
        lines += ["", f"## {who}: us of CPU per request by phase", "",
                  "| size | mode | side | " + " | ".join(order) + " |", "|---" * (len(order) + 3) + "|"]
        for r in rows:
            cells = [f"{r[key].get(p, 0.0) * r[total]:.1f}" for p in order]
            lines.append(f"| {label(r['bytes'])} | {r['mode']} | {r['side']} | " + " | ".join(cells) + " |")
    if len(sides) == 2:
        lines += ["", "## After over before", "", "| size | mode | shard CPU | client CPU | shard calls | client calls |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            if r["side"] != "after":
                continue
            b = next((x for x in rows if x["side"] == "before" and x["bytes"] == r["bytes"] and x["mode"] == r["mode"]),
                     None)
            if b is None:  # a run cut short before this point's other side
                continue
            calls = [f"{r[k] / b[k]:.2f}" if r.get(k) and b.get(k) else "" for k in
                     ("shard_calls_per_request", "client_calls_per_request")]
            lines.append(f"| {label(r['bytes'])} | {r['mode']} | "
                         f"{r['shard_us_per_request'] / b['shard_us_per_request']:.2f} | "
                         f"{r['client_us_per_request'] / b['client_us_per_request']:.2f} | " + " | ".join(calls) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
