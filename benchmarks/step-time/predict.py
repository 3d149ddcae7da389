"""Step time predicted from a host profile alone, against the step measured here, for models it never saw.

    .venv/bin/psgd sim profile --out /tmp/host.json      # first, apart (any time before)
    .venv/bin/python benchmarks/step-time/predict.py --profile /tmp/host.json [--steps 30] [--out DIR]

For each model (the quickstart MLP, the MNIST-1D CNN at 32 and 256 channels, the charlm
transformer), the prediction is psgd.sim.op_count's count of the step's work (one steady-state
forward + backward of one batch, counted once) costed at the profile, term by term
(StepWork.host_terms: the pass, the operations' dispatch, products, convolutions, attention, other
operations' bytes). Nothing is fitted on the models. The measurement is the median CPU time of
`--steps` forward + backward passes of the same model on its own batches, on one thread, after one
untimed step (what `sim.compute_ms: measure` times). On a loaded machine both the profile and the measurement are unreliable: run the
two on a quiet one. Writes DIR/step-time.md and DIR/step-time.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "quickstart MLP": ("configs/quickstart.yaml", []),
    "MNIST-1D CNN, 32 channels": ("benchmarks/convergence/mnist1d.yaml", ["task.model_args={channels: 32}"]),
    "MNIST-1D CNN, 256 channels": ("benchmarks/convergence/mnist1d.yaml", ["task.model_args={channels: 256}"]),
    "charlm transformer": ("benchmarks/convergence/charlm.yaml", []),
}
TERMS = ("pass", "dispatch", "products", "convolutions", "attention", "memory")
WITHIN = 0.25  # acceptance: the prediction within ±25% of the measured step


def measure_ms(cfg, task, steps: int) -> float:
    from psgd.tasks import build_model
    from psgd.tasks.loaders import train_loader
    from psgd.workers.step import forward_backward
    model = build_model(cfg, task)
    batches = train_loader(task.train_data(), 0, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed)
    times = []
    for i in range(steps + 1):
        batch = next(batches)
        t0 = time.process_time()
        model.zero_grad(set_to_none=False)
        forward_backward(task, model, batch)
        if i:
            times.append(time.process_time() - t0)
    return statistics.median(times) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", required=True, help="a host profile (psgd sim profile --out FILE) or a shipped name")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", action="append", help="run only the models whose name contains this (repeatable)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    args = ap.parse_args(argv)
    import torch

    from psgd.config import load_config
    from psgd.sim.host_profile import load_host_profile
    from psgd.sim.op_count import step_work
    from psgd.tasks import load_task
    torch.set_num_threads(1)
    profile = load_host_profile(args.profile)
    rows = []
    for name, (path, sets) in MODELS.items():
        if args.only and not any(o in name for o in args.only):
            continue
        cfg = load_config(ROOT / path, sets)
        task = load_task(cfg, None, splits=("train",))
        work = step_work(cfg, task)
        terms = {k: round(v * 1e3, 4) for k, v in work.host_terms(profile).items()}
        predicted = work.host_s(profile) * 1e3
        measured = measure_ms(cfg, task, args.steps)
        rows.append({"model": name, "config": path, "set": sets, "ops": work.ops, "flops": work.flops,
                     "memory_mb": round(sum(work.memory) / 1e6, 3), "terms_ms": terms,
                     "predicted_ms": round(predicted, 4), "measured_ms": round(measured, 4),
                     "ratio": round(predicted / measured, 3), "within": abs(predicted / measured - 1) <= WITHIN})
    load = os.getloadavg()[0]
    lines = [f"Step time from the host profile alone ({profile.measured_on}), against the step measured here "
             f"(median of {args.steps} steps, CPU time, one thread; load average {load:.1f} at the end).", "",
             "| model | operations | MFLOP | predicted (ms) | measured (ms) | predicted / measured | within ±25% |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ops']} | {r['flops'] / 1e6:.1f} | {r['predicted_ms']:.3f} | "
                     f"{r['measured_ms']:.3f} | {r['ratio']:.2f} | {'yes' if r['within'] else 'no'} |")
    hits = sum(r["within"] for r in rows)
    lines += ["", f"{hits} of {len(rows)} models within ±25%.", "",
              "The prediction by term (ms; psgd.sim.op_count's StepWork.host_terms), and the MB the other "
              "operations stream:", "", "| model | " + " | ".join(TERMS) + " | memory MB |",
              "|---|" + "---|" * (len(TERMS) + 1)]
    for r in rows:
        lines.append(f"| {r['model']} | " + " | ".join(f"{r['terms_ms'][t]:.3f}" for t in TERMS)
                     + f" | {r['memory_mb']:.1f} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step-time.md").write_text("\n".join(lines) + "\n")
    (out / "step-time.json").write_text(json.dumps({"profile": profile.measured_on, "rows": rows}, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
