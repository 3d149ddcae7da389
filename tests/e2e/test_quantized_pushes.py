"""Quantized pushes at a real shard process: forged block scales, non-finite
scales and frames of the wrong length get an error reply and leave the shard
exactly as it was; a quantized local-update delta sent twice (a resend, same
seq) is applied once, and what it applied is exactly the decoded delta."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import kill_tree, spawn, wait_for, write_config
from support.raw_client import Raw

from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.tasks import build_model, load_task
from psgd.wire import protocol as P
from psgd.wire.codecs import CodecOptions, codec_named
from psgd.wire.codecs._blocks import max_scale
from psgd.wire.frames import view_frame

pytestmark = pytest.mark.e2e


def push_fields(encoding: str, size: int, **over) -> dict:
    return {"rank": 0, "seq": 0, "clock": 0, "read_version": 0, "encoding": encoding, "numel": size, "steps": 8,
            **over}


def params(raw: Raw, clock: int, numel: int) -> torch.Tensor:
    rec, payload = raw.exchange(P.MsgType.PULL, {"rank": 0, "clock": clock})
    assert isinstance(rec, P.Params), rec
    return view_frame(payload[0], torch.float32, numel, "params").clone()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("encoding", ["int8", "int4", "int2_ef"])
def test_forged_quantized_pushes_are_refused_and_a_resent_delta_applies_once(tmp_path, encoding):
    address = f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}"
    # Plain local SGD (outer lr 1, no momentum), one worker: a delta d moves the shard to p - d.
    config = write_config(tmp_path / "c.yaml", cluster={"servers": [address], "workers": 1, "timeout_s": 30.0},
                          task={"model": "linear", "dataset": "synthetic"}, local={"steps": 8},
                          checkpoint={"enabled": False})
    cfg = load_config(config)
    layout = layout_for_module(build_model(cfg, load_task(cfg)), 1)
    n = layout.shard_sizes[0]
    run = tmp_path / "run"
    run.mkdir()
    proc = spawn([sys.executable, "-m", "psgd.cli", "server", str(config), "--shard", "0", "--run-dir", str(run)],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    raw = Raw(address)
    try:
        events = run / "events" / "server-0.jsonl"
        assert wait_for(lambda: (events.exists() and '"ready"' in events.read_text()) or proc.poll() is not None,
                        timeout=60) and proc.poll() is None
        welcome, payload = raw.exchange(P.MsgType.REGISTER, {"rank": 0, "role": "worker",
                                                        "fingerprint": layout.fingerprint})
        assert isinstance(welcome, P.Welcome), welcome
        start = view_frame(payload[0], torch.float32, n, "params").clone()

        codec = codec_named(encoding)
        delta = torch.randn(n, generator=torch.Generator().manual_seed(5)) * 0.01
        encoded = codec([n], CodecOptions()).encode(0, delta)
        codes, scales = (bytes(memoryview(f)) for f in encoded.frames)
        blocks = len(scales) // 4
        cap = max_scale(codec.bits)

        def with_scale(value) -> bytes:
            forged = torch.frombuffer(bytearray(scales), dtype=torch.float32).clone()
            forged[blocks - 1] = value
            return bytes(memoryview(forged.numpy()).cast("B"))

        hostile = {
            "nan scale": ([codes, with_scale(float("nan"))], {}),
            "inf scale": ([codes, with_scale(float("inf"))], {}),
            "negative scale": ([codes, with_scale(-1.0)], {}),
            "scale past the cap": ([codes, with_scale(torch.nextafter(cap, torch.tensor(float("inf"))))], {}),
            "short code frame": ([codes[:-1], scales], {}),
            "long scale frame": ([codes, scales + bytes(4)], {}),
            "header scale": ([codes, scales], {"scale": 2.0}),
            "numel disagrees": ([codes, scales], {"numel": n + 1}),
            "one frame": ([codes], {}),
        }
        for what, (frames, over) in hostile.items():
            rec, _ = raw.exchange(P.MsgType.PUSH, push_fields(encoding, n, **over), *frames)
            assert isinstance(rec, P.Error), (what, rec)
        assert torch.equal(params(raw, 0, n), start)  # nothing of any refused push reached the parameters
        rec, _ = raw.exchange(P.MsgType.STATS, {})
        assert rec.stats["version"] == 0 and rec.stats["counters"]["bad_requests"] == len(hostile)

        first, _ = raw.exchange(P.MsgType.PUSH, push_fields(encoding, n), codes, scales)
        again, _ = raw.exchange(P.MsgType.PUSH, push_fields(encoding, n), codes, scales)  # the resend: same seq
        assert isinstance(first, P.Ack) and first.applied and first.version == 1
        assert isinstance(again, P.Ack) and again.version == 1
        sent = codec.decode(encoded.frames, n, 0, 1.0, torch.empty(n))
        assert torch.equal(params(raw, 1, n), start - sent)  # applied once, exactly the decoded delta
        rec, _ = raw.exchange(P.MsgType.STATS, {})
        assert rec.stats["version"] == 1 and rec.stats["counters"]["duplicates"] == 1
    finally:
        raw.close()
        kill_tree(proc)
