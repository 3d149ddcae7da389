"""The least CPU per request any Python shard loop pays on this machine, under `psgd bench scale`'s load.

`psgd bench scale`'s light workers (threads in 4 processes; each sleeps 20 ms, then pushes and pulls a
64 KB fp32 gradient) are served here by a floor server instead of a psgd shard: one Python thread that
does only what any same-host shard must per request, through psgd's own shared-memory segments:
wait for a doorbell (one epoll over every client's FIFO), read it, copy the gradient out of the
client's segment, check it is finite (one sum), apply plain SGD in place, copy the parameters into
the client's reply region, ring the client's doorbell. No header, no validation, no bookkeeping,
no ZeroMQ. Each point then runs psgd's own shard (`psgd.bench.scale`, the same workers, compute time,
window) right after, so the two columns are side by side in one run.

    python benchmarks/shard-cpu/floor.py --workers 1,16,64,128 --out benchmarks/shard-cpu/floor

Writes results.json and report.md (CPU per request: the server process's CPU time over the window
/ the requests it served in it, as bench scale counts it).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import select
import tempfile
import threading
import time
from pathlib import Path

import torch

from psgd.bench.procs import bench_context, process_cpu_s
from psgd.bench.scale import run_scale_bench
from psgd.wire.shm.attached import AttachedSegment
from psgd.wire.shm.segment import Segment

WARMUP_S, WINDOW_S, PROCESSES = 1.0, 3.0, 4


def _server(fifo_dir: str, offers, numel: int, conn) -> None:
    """The floor server: every client's segment attached, its request FIFO in one epoll."""
    torch.set_num_threads(1)
    params, grad = torch.zeros(numel), torch.empty(numel)
    epoll, clients = select.epoll(), {}
    for rank, (name, token) in offers.items():
        seg = AttachedSegment.attach(name, token, 4 * numel, 4 * numel)
        ask = os.open(f"{fifo_dir}/req{rank}", os.O_RDONLY | os.O_NONBLOCK)
        answer = os.open(f"{fifo_dir}/rep{rank}", os.O_RDWR)
        epoll.register(ask, select.EPOLLIN)
        clients[ask] = [seg, answer, 0]
    conn.send("ready")
    t0 = conn.recv()  # the point's start, once every process is ready
    start, end = t0 + WARMUP_S, t0 + WARMUP_S + WINDOW_S
    served, marks = 0, {}
    while True:
        now = time.time()
        for key, at in (("start", start), ("end", end)):
            if key not in marks and now >= at:
                marks[key] = (served, process_cpu_s(os.getpid()))
        if "end" in marks and now > end + 1.0:
            break
        for fd, _ in epoll.poll(0.05):
            gen = os.read(fd, 8)
            if len(gen) < 8:  # the client closed its end
                epoll.unregister(fd)
                continue
            client = clients[fd]
            seg = client[0]
            if seg.read_request(int.from_bytes(gen, "little"), grad) and math.isfinite(grad.sum().item()):
                params.add_(grad, alpha=-1e-6)
            client[2] += 1
            seg.put_reply(client[2], params)
            os.write(client[1], b"r")
            served += 1
    (n0, c0), (n1, c1) = marks["start"], marks["end"]
    conn.send({"requests": n1 - n0, "cpu_s": c1 - c0})


def _clients(fifo_dir: str, ranks: list[int], numel: int, compute_s: float, conn) -> None:
    """Light workers as threads: sleep, push+pull through the segment and the FIFOs, copy the reply."""
    torch.set_num_threads(1)
    segs = {r: Segment.create(4 * numel, 4 * numel) for r in ranks}
    conn.send({r: (s.name, s.token_hex) for r, s in segs.items()})
    t0 = conn.recv()  # the server has attached every segment: the point's start

    def worker(rank: int) -> None:
        seg, grad, model = segs[rank], torch.randn(numel) * 1e-3, torch.zeros(numel)
        ask = os.open(f"{fifo_dir}/req{rank}", os.O_WRONLY)
        answer = os.open(f"{fifo_dir}/rep{rank}", os.O_RDONLY)
        time.sleep(max(0.0, t0 - time.time()))
        req = 0
        while time.time() < t0 + WARMUP_S + WINDOW_S:
            time.sleep(compute_s)
            gen, _ = seg.put_request(grad)
            os.write(ask, gen.to_bytes(8, "little"))
            os.read(answer, 1)
            req += 1
            model.copy_(seg.reply_tensor(req, torch.float32, numel))
        os.close(ask)
        os.close(answer)

    threads = [threading.Thread(target=worker, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conn.send("done")


def floor_point(workers: int, numel: int, compute_ms: float) -> dict:
    ctx = bench_context()
    with tempfile.TemporaryDirectory() as fifo_dir:
        for r in range(workers):
            os.mkfifo(f"{fifo_dir}/req{r}")
            os.mkfifo(f"{fifo_dir}/rep{r}")
        pool, offers = [], {}
        for i in range(PROCESSES):
            ranks = list(range(i, workers, PROCESSES))
            if ranks:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_clients, args=(fifo_dir, ranks, numel, compute_ms / 1e3, child),
                                   daemon=True)
                proc.start()
                pool.append((proc, parent))
                offers.update(parent.recv())
        parent, child = ctx.Pipe()
        server = ctx.Process(target=_server, args=(fifo_dir, offers, numel, child), daemon=True)
        server.start()
        if parent.recv() != "ready":
            raise RuntimeError("the floor server did not start")
        t0 = time.time() + 0.5 + workers * 0.005  # time for every light worker to open its FIFOs
        parent.send(t0)
        for _, conn in pool:
            conn.send(t0)
        for proc, conn in pool:
            conn.recv()
            proc.join(timeout=30)
        got = parent.recv()
        server.join(timeout=30)
    return {"workers": workers, "requests_per_s": round(got["requests"] / WINDOW_S, 2),
            "floor_cpu_ms_per_request": round(got["cpu_s"] * 1e3 / got["requests"], 4),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def psgd_point(workers: int, grad_bytes: int, compute_ms: float) -> dict:
    row = run_scale_bench([1], [workers], grad_bytes=grad_bytes, compute_ms=compute_ms, warmup_s=WARMUP_S,
                          window_s=WINDOW_S, processes=PROCESSES)["rows"][0]
    return {"workers": workers, "updates_per_s": row["updates_per_s"],
            "psgd_cpu_ms_per_request": round(row["shard_cpu_cores"] * 1e3 / row["updates_per_s"], 4),
            "load_avg_1m": row["load_avg_1m"]}


def report(rows: list[dict], command: str) -> str:
    lines = ["# The floor of a Python shard's CPU per request, beside psgd's shard", "", "Produced by:", "",
             "```", command, "```", "",
             f"Machine: {os.cpu_count()} cores. `psgd bench scale`'s load (light workers as threads in {PROCESSES} "
             f"processes, {rows[0]['compute_ms']:g} ms of simulated compute, then a push+pull of "
             f"{rows[0]['grad_bytes'] >> 10} KB fp32; {WARMUP_S:g} s warm-up, {WINDOW_S:g} s window). "
             "'floor' is a server doing only what any same-host shard must per request (doorbell wait and read, "
             "gradient out of the client's shared-memory segment, one finiteness sum, plain SGD in place, "
             "parameters into the reply region, doorbell), in one Python thread; 'psgd' is one psgd shard "
             "(`psgd.bench.scale`), run right after at the same point. CPU per request = the server process's "
             "CPU time over the window / the requests it served in it.", "",
             "| workers | floor requests/s | floor CPU ms/request | psgd updates/s | psgd CPU ms/request "
             "| psgd / floor | load avg |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workers']} | {r['requests_per_s']:g} | {r['floor_cpu_ms_per_request']:.3f} | "
                     f"{r['updates_per_s']:g} | {r['psgd_cpu_ms_per_request']:.3f} | "
                     f"{r['psgd_cpu_ms_per_request'] / r['floor_cpu_ms_per_request']:.2f} | "
                     f"{r['load_avg_1m']:g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,16,64,128")
    ap.add_argument("--grad-kb", type=int, default=64)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    numel = args.grad_kb * 1024 // 4
    rows = []
    for w in (int(x) for x in args.workers.split(",")):
        row = {**floor_point(w, numel, args.compute_ms), "grad_bytes": args.grad_kb * 1024,
               "compute_ms": args.compute_ms}
        psgd = psgd_point(w, args.grad_kb * 1024, args.compute_ms)
        row.update(updates_per_s=psgd["updates_per_s"], psgd_cpu_ms_per_request=psgd["psgd_cpu_ms_per_request"],
                   load_avg_1m=max(row["load_avg_1m"], psgd["load_avg_1m"]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python benchmarks/shard-cpu/floor.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)
        (out / "results.json").write_text(json.dumps({"rows": rows}, indent=1) + "\n")
        (out / "report.md").write_text(report(rows, cmd))


if __name__ == "__main__":
    main()
