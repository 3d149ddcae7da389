"""The push codecs on cuda: every codec psgd pushes with (each `wire.compression` value but
none) encodes tensors that live on the device, and the CPU decodes them.

For each codec and shape (one element, lengths off the 64-element block, a 2-D and a 4-D
tensor, and a large flat one) the same values, drawn on the CPU, are encoded twice: on the
device as they are shaped, and on the CPU flat, as a worker's host buffer holds them. The
check asks (a) that the device's round trip is within the codec's own stated bound
(`Codec.round_trip_bound`, the one its unit tests use) and (b) that both encodings are the
same bytes: every codec is deterministic (round to nearest, no stochastic rounding) and
avoids kernels whose rounding differs by device, so a difference is a finding. Top-k alone
could differ where magnitudes tie at the k-th (the device picks among them); these draws
have no such tie, in the round trips or the feedback pushes (checked on the CPU).
(c) The error-feedback codecs over many pushes on the device: the sum of what was sent
plus the final residual is the sum of the gradients, within the one
fp32 rounding of residual + gradient per push (the unit tests' slack), and the device's
residual equals the CPU's. (d) Each codec's encode time at the large size, on the device and
on one CPU thread (as every psgd process runs), as a ratio: reported, never judged.

On a GPU the check then runs the quickstart on cuda with int8 pushes and int8 replies and
reports its summary's byte figures. With --device cpu (the dry run) the device side is the
CPU again, at small sizes, and the quickstart run is left out (its config is loaded).
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from check_kit import (  # beside this script
    QUICKSTART,
    SUMMARY_KEYS,
    command_line,
    failed_run,
    launch,
    median_s,
    on_device,
    result,
    worker_devices,
    write,
)

SIZES = {"cuda": {"shapes": [(1,), (63,), (65,), (1001,), (33, 77), (3, 5, 7, 11), (4 * 2**20,)],
                  "feedback": (100_003, 100), "repeats": 5},
         "cpu": {"shapes": [(1,), (63,), (65,), (1001,), (33, 77), (3, 5, 7, 11), (2**16,)],
                 "feedback": (1000, 30), "repeats": 2}}
FP32_ADD_ROUNDING = 2.0 ** -24  # one fp32 addition's relative rounding: the feedback identity's slack per push
# The quickstart with int8 pushes and replies; its time capped well inside the check's limit (run.sh).
QUICKSTART_SETS = ["wire.compression={default: int8, replies: int8}", "checkpoint.enabled=false", "train.max_time_s=20"]


def push_codecs() -> list[str]:
    """Every codec a push may use, by word: all but none (fp32, no encoding: the gradient itself)."""
    from psgd.wire.codecs import CODECS
    return sorted(name for name, c in CODECS.items() if c.cost is not None)


def _values(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Normal draws scaled over decades, on the CPU (the same values for every device)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen) * torch.rand(shape, generator=gen) ** 4 * 10


def _dense(got, numel: int) -> torch.Tensor:
    """A decoded push as a dense fp32 tensor (top-k decodes to indices and values)."""
    if isinstance(got, tuple):
        return torch.zeros(numel).index_put_((got[0].long(),), got[1])
    return got


def _decode(name: str, encoded, numel: int) -> torch.Tensor:
    from psgd.wire.codecs import CODECS
    return _dense(CODECS[name].decode(encoded.frames, numel, encoded.nnz, encoded.scale, torch.empty(numel)), numel)


def _differing_bytes(a, b) -> int:
    """Bytes that differ between two encodings' frames (a length difference counts whole)."""
    diff = 0
    for fa, fb in zip(a.frames, b.frames):
        x, y = bytes(fa), bytes(fb)
        diff += sum(p != q for p, q in zip(x, y)) + abs(len(x) - len(y))
    return diff + (a.scale != b.scale) + (a.nnz != b.nnz)


def round_trips(device: str) -> list[dict]:
    """(a) and (b) for each codec and shape."""
    from psgd.wire.codecs import CODECS, CodecOptions, WireEncoder
    options, rows = CodecOptions(), []
    for seed, shape in enumerate(SIZES[device]["shapes"]):
        x = _values(shape, seed)
        n = x.numel()
        on_device = x.to(device)
        for name in push_codecs():
            there = WireEncoder(name, [n], options.topk_ratio).encode(0, on_device)
            here = WireEncoder(name, [n], options.topk_ratio).encode(0, x.reshape(-1).clone())
            err = (_decode(name, there, n).double() - x.reshape(-1).double()).abs()
            bound = CODECS[name].round_trip_bound(x, options)
            of_bound = torch.where(bound > 0, err / bound, torch.where(err > 0, float("inf"), 0.0))
            differing = _differing_bytes(there, here)
            rows.append({"codec": name, "shape": list(shape), "max_error": float(err.max()),
                         "max_error_of_bound": float(of_bound.max()), "within_bound": bool((err <= bound).all()),
                         "wire_bytes": sum(len(bytes(f)) for f in there.frames), "identical": differing == 0,
                         "differing_bytes": differing})
    return rows


def _residual(codec, numel: int) -> torch.Tensor:
    """The codec's residual for shard 0 on the CPU (zeros before its first push)."""
    try:
        return codec.residuals[0].cpu()
    except (KeyError, IndexError):
        return torch.zeros(numel)


def feedback(device: str) -> list[dict]:
    """(c): each error-feedback codec pushing `steps` gradients from the device."""
    from psgd.wire.codecs import CODECS, WireEncoder
    numel, steps = SIZES[device]["feedback"]
    rows = []
    for name in (n for n in push_codecs() if CODECS[n].error_feedback):
        there, here = WireEncoder(name, [numel]), WireEncoder(name, [numel])
        total, sent, slack = (torch.zeros(numel, dtype=torch.float64) for _ in range(3))
        same_pushes = 0
        for step in range(steps):
            g = _values((numel,), 1000 + step)
            before = _residual(there.codec, numel)
            pushed = there.encode(0, g.to(device))
            same_pushes += _differing_bytes(pushed, here.encode(0, g)) == 0
            slack += FP32_ADD_ROUNDING * (before + g).double().abs()
            total += g.double()
            sent += _decode(name, pushed, numel).double()
        residual = _residual(there.codec, numel)
        gap = (sent + residual.double() - total).abs()
        rows.append({"codec": name, "numel": numel, "pushes": steps, "max_gap": float(gap.max()),
                     "max_slack": float(slack.max()), "loses_nothing": bool((gap <= slack).all()),
                     "residual_max": float(residual.abs().max()),
                     "residual_equals_cpu": torch.equal(residual, _residual(here.codec, numel)),
                     "identical_pushes": same_pushes})
    return rows


def timings(device: str) -> list[dict]:
    """(d): each codec's encode (frames on the host, as a push needs them) at the largest shape."""
    from psgd.wire.codecs import WireEncoder
    size = SIZES[device]
    x = _values(size["shapes"][-1], 7).reshape(-1)
    on_device = x.to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for name in push_codecs():
        there, here = WireEncoder(name, [x.numel()]), WireEncoder(name, [x.numel()])
        device_s = median_s(partial(there.encode, 0, on_device), size["repeats"], sync)
        cpu_s = median_s(partial(here.encode, 0, x), size["repeats"], lambda: None)
        rows.append({"codec": name, "numel": x.numel(), "device_s": device_s, "cpu_s": cpu_s,
                     "cpu_over_device": cpu_s / device_s})
    return rows


def measure(device: str) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU side as every psgd process runs
    try:
        return {"codecs": push_codecs(), "round_trips": round_trips(device), "feedback": feedback(device),
                "timings": timings(device), "cpu_threads": 1}
    finally:
        torch.set_num_threads(threads)


def quickstart_int8(device: str, work: Path) -> tuple[bool, str, dict, str]:
    """The quickstart on `device` with int8 pushes and replies: (ok, why not, its figures, the command)."""
    sets = [f"workers.device={device}", *QUICKSTART_SETS]
    proc, run_dir, summary = launch(work, "codecs-quickstart", QUICKSTART, sets)
    command = command_line("launch", "configs/quickstart.yaml", *[f"--set '{s}'" for s in sets])
    figures = {k: v for k, v in summary.items() if k in SUMMARY_KEYS or "bytes" in k or "compression" in k
               or k.startswith("codec_")}
    figures["worker_devices"] = devices = worker_devices(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    ok = proc.returncode == 0 and summary.get("status") == "ok" and on_device(devices, device)
    why = "" if ok else f"the int8 quickstart on {device} failed: {failed_run(proc)}; workers on {devices}"
    return ok, why, figures, command


def check_codecs(device: str, out: Path, work: Path) -> int:
    """`checks.py codecs`. Its JSON goes into the work folder (runs.tar.gz), as sim-batched's:
    the device tool returns at most 8 files."""
    commands = [f"python benchmarks/gpu/checks.py codecs --device {device}"]
    try:
        found = measure(device)
    except Exception as exc:  # noqa: BLE001 - the check's finding, not a crash of the script
        return write(work, "codecs", result("codecs", device, False, f"{type(exc).__name__}: {exc}", commands))
    trips, fed = found["round_trips"], found["feedback"]
    outside = sorted({r["codec"] for r in trips if not r["within_bound"]})
    differ = sorted({r["codec"] for r in trips if not r["identical"]})
    lossy = sorted(r["codec"] for r in fed if not (r["loses_nothing"] and r["residual_equals_cpu"]))
    problems = [f"outside their bound: {', '.join(outside)}"] * bool(outside) \
        + [f"{device} bytes differ from the cpu's: {', '.join(differ)}"] * bool(differ) \
        + [f"error feedback lost or diverged: {', '.join(lossy)}"] * bool(lossy)
    worst = {c: max(r["max_error_of_bound"] for r in trips if r["codec"] == c) for c in found["codecs"]}
    detail = (f"{len(found['codecs'])} codecs x {len(SIZES[device]['shapes'])} shapes: worst error of bound "
              + ", ".join(f"{c} {v:.3f}" for c, v in worst.items())
              + f"; {sum(r['identical'] for r in trips)}/{len(trips)} encodings the cpu's bytes; feedback "
              + ", ".join(f"{r['codec']} gap {r['max_gap']:.1e} <= {r['max_slack']:.1e} over {r['pushes']}"
                          for r in fed)
              + f"; encode cpu/{device} at {found['timings'][0]['numel']}: "
              + ", ".join(f"{r['codec']} x{r['cpu_over_device']:.1f}" for r in found["timings"]))
    if device != "cuda":  # the run needs a GPU; its config is checked here so that it cannot rot
        from psgd.config import load_config
        load_config(QUICKSTART, ["workers.device=cuda", *QUICKSTART_SETS])
    else:
        ok, why, figures, command = quickstart_int8(device, work)
        commands.append(command)
        found["quickstart_int8"] = figures
        problems += [why] * (not ok)
        if ok:
            detail += (f"; quickstart int8 on cuda: {figures.get('status')}, accuracy {figures.get('final_test_accuracy')}, "
                       f"wire bytes/example {figures.get('wire_bytes_per_example')}, pull bytes/example "
                       f"{figures.get('pull_bytes_per_example')}")
    if problems:
        detail = "; ".join(problems) + "; " + detail
    return write(work, "codecs", result("codecs", device, not problems, detail, commands, **found))
