"""What durability costs: push+pull round trips against one in-process shard
with no checkpointing, with snapshots + the operation log, and with an fsync
per log record, measured side by side (rounds interleaved) in one run.

    python benchmarks/checkpoint_overhead.py [--pushes 300] [--rounds 5] [--out benchmarks/checkpoint_overhead.md]

Writes a Markdown report with medians and ratios to the no-checkpoint baseline.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.servers.checkpoint import ShardCheckpoint
from psgd.servers.shard import ShardServer
from psgd.tasks import build_model, load_task
from psgd.workers.client import PSClient

VARIANTS = {
    "none": None,
    "snapshot+log": {"checkpoint.fsync_log": "false"},
    "snapshot+log+fsync": {"checkpoint.fsync_log": "true"},
}


def run_once(variant: str, pushes: int, model_args: str, every: int, workdir: Path) -> float:
    """Push+pull round trips per second for one variant."""
    sets = ["cluster.servers=1", "cluster.workers=1", "consistency.mode=asp", "task.model=mlp",
            f"task.model_args={model_args}", f"checkpoint.every_updates={every}", "checkpoint.every_s=0"]
    sets += [f"{k}={v}" for k, v in (VARIANTS[variant] or {}).items()]
    cfg = load_config(None, sets)
    model = build_model(cfg, load_task(cfg))
    layout = layout_for_module(model, 1)
    params = layout.flatten([p.detach() for p in model.parameters()])[0]
    ckpt = None
    if VARIANTS[variant] is not None:
        ckpt = ShardCheckpoint(Path(tempfile.mkdtemp(dir=workdir)), 0, layout.fingerprint, cfg.checkpoint)
    server = ShardServer(cfg, 0, "127.0.0.1:0", params, layout.fingerprint, checkpoint=ckpt)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, args=(stop,), daemon=True)
    thread.start()
    client = PSClient([server.address], layout, rank=0, heartbeat_s=None)
    try:
        client.register()
        grad = [torch.full((layout.shard_sizes[0],), 1e-4)]
        t0 = time.perf_counter()
        for _ in range(pushes):
            client.push_pull(grad)
        return pushes / (time.perf_counter() - t0)
    finally:
        client.close()
        stop.set()
        thread.join(timeout=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pushes", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--hidden", type=int, default=512, help="MLP width (sets the shard size)")
    p.add_argument("--every-updates", type=int, default=500, help="snapshot interval (checkpoint.every_updates)")
    p.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".md"))
    args = p.parse_args()
    torch.set_num_threads(1)
    model_args = "{hidden: %d}" % args.hidden
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for variant in VARIANTS:  # interleaved, so load changes hit every variant alike
                rates[variant].append(run_once(variant, args.pushes, model_args, args.every_updates, Path(tmp)))
    base = statistics.median(rates["none"])
    numel = layout_for_module(build_model(load_config(None, [f"task.model_args={model_args}"]),
                                          load_task(load_config(None, []))), 1).total
    lines = [
        "# Checkpoint overhead",
        "",
        f"One in-process shard, digits MLP with {numel} parameters ({numel * 4 / 1e6:.2f} MB per gradient), "
        f"one client doing {args.pushes} push+pull round trips per measurement, {args.rounds} interleaved rounds; "
        f"snapshots every {args.every_updates} updates.",
        "",
        f"Command: `python benchmarks/checkpoint_overhead.py --pushes {args.pushes} --rounds {args.rounds} "
        f"--hidden {args.hidden} --every-updates {args.every_updates}`",
        "",
        "| variant | median round trips/s | ratio to none |",
        "|---|---:|---:|",
    ]
    for variant, r in rates.items():
        med = statistics.median(r)
        lines.append(f"| {variant} | {med:.0f} | {med / base:.2f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
