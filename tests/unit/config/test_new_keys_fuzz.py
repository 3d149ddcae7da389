"""Issue 39, acceptance 4: 100 seeded mutations of this round's new keys (the worker range,
wire.compression as a mapping, workers.device_ms, the simulator's time model and device
profiles, local.*), one to three at a time over `--set`. Each either loads (and then
survives a run directory's config.yaml unchanged, and a virtual-cluster config passes the
simulator's own check when its step time is stated) or fails with one ConfigError line
naming a config key: never another exception."""
import random

from psgd.config import ConfigError, config_to_dict, load_config
from psgd.config.loader import parse_override
from psgd.sim.plan import check_plan

SEED = 39
MUTATIONS = 100

# Values an adversary tries: valid ones, bounds, wrong types, non-finite and absurd sizes.
NUMBERS = ["0", "1", "2", "-1", "3.5", "1e-9", "1e308", "-1e308", "1e999", ".nan", ".inf", "2147483648",
           "99999999999999999999", "true", "null", "abc", "[]", "{}", "[1, 2]"]
KEYS = {
    "cluster.workers": ["{min: 2, max: 6}", "{min: 0, max: 3}", "{min: 4, max: 2}", "{min: 1}", "{max: 5}",
                        "{min: 2, max: 6, start: 3}", "{min: 2.5, max: 6}", "{min: -1, max: -1}",
                        "{min: 1, max: 2000000}", "{min: 3, max: 3}", "{}", "[2, 6]", "2-6", "0", "5"],
    "cluster.workers.min": NUMBERS,
    "cluster.workers.max": NUMBERS,
    "wire.compression": ["int8", "{default: int4, small: none}", "{default: topk, deltas: int2_ef}",
                         "{small_below: -5}", "{default: zip}", "{deltas: fp16, small_below: 1e308}", "[int8]",
                         "{default: {x: 1}}", "null", "{}"],
    "wire.compression.default": ["int8", "int4", "none", "bogus", "1", "null"],
    "wire.compression.small_below": NUMBERS,
    "workers.device_ms": NUMBERS,
    "sim.compute_ms": NUMBERS + ["measure", "measured"],
    "sim.device": ["cpu", "h100-bf16", "a100", "tpu", "", "1", "null", "mine"],
    "sim.devices": ["{mine: {peak_tflops: 10}}", "{mine: {peak_tflops: 0}}", "{mine: {efficiency: 2}}",
                    "{mine: {peak_tflops: 1, host_gbytes_per_s: -1}}", "{mine: 3}", "[1]", "{}"],
    "sim.devices.mine.peak_tflops": NUMBERS,
    "sim.efficiency": NUMBERS,
    "sim.speedup": NUMBERS,
    "sim.warmup_steps": NUMBERS,
    "sim.compute_jitter": NUMBERS,
    "sim.worker_spread": NUMBERS,
    "sim.latency_us": NUMBERS,
    "sim.bandwidth_gbps": NUMBERS,
    "sim.worker_bandwidth_gbps": NUMBERS,
    "sim.shard_latency_us": NUMBERS,
    "sim.request_us": NUMBERS,
    "sim.apply_gbytes_per_s": NUMBERS,
    "sim.wake_us": NUMBERS,
    "sim.encode_gbytes_per_s": NUMBERS,
    "sim.batched": ["true", "false", "1", "yes", "null"],
    "sim.step_times_from": ["''", "runs/x", "1", "null"],
    "local.steps": NUMBERS,
    "local.dynamic": ["true", "false", "1"],
    "local.outer_lr": NUMBERS,
    "local.outer_momentum": NUMBERS,
    "local.outer_nesterov": ["true", "false", "0"],
    "local.delayed_nesterov": ["true", "false", "0"],
    "consistency.mode": ["bsp", "ssp", "asp", "allreduce"],  # what the new keys interact with
    "cluster.launcher": ["local", "sim"],
    "optimizer.lr_scaling": ["none", "linear"],
}
SECTIONS = {"run", "cluster", "consistency", "task", "optimizer", "train", "eval", "workers", "wire", "checkpoint",
            "supervision", "security", "ray", "logging", "local", "sim"}


def mutations():
    rng = random.Random(SEED)
    keys = sorted(KEYS)
    for _ in range(MUTATIONS):
        chosen = rng.sample(keys, rng.randint(1, 3))
        yield [f"{key}={rng.choice(KEYS[key])}" for key in chosen]


def test_a_hundred_mutations_of_the_new_keys_load_or_name_the_key_in_one_line():
    loaded, refused, keys_named = 0, 0, set()
    for sets in mutations():
        for item in sets:
            parse_override(item)  # every mutation is a well-formed --set
        try:
            cfg = load_config(None, sets)
            if cfg.cluster.launcher == "sim" and isinstance(cfg.sim.compute_ms, float):
                check_plan(cfg)   # no task to load: the stated step time
        except ConfigError as exc:
            refused += 1
            text = str(exc)
            assert "\n" not in text and exc.key.split(".")[0].split("[")[0] in SECTIONS, (sets, text)
            keys_named.add(exc.key)
            continue
        loaded += 1
        again = load_config(config_to_dict(cfg))  # what a run directory's config.yaml holds
        assert again.cluster == cfg.cluster and again.sim == cfg.sim and again.local == cfg.local \
            and again.wire == cfg.wire and again.workers == cfg.workers, sets
    assert loaded + refused == MUTATIONS
    # The seed covers both outcomes and many keys (fixed by the seed: a change in the loader shows).
    assert loaded >= 10 and refused >= 40 and len(keys_named) >= 15, (loaded, refused, sorted(keys_named))


def test_a_device_profile_without_its_peak_names_the_key():
    # Found by the mutations above: a section key without a default raised TypeError.
    try:
        load_config(None, ["sim.devices={mine: {efficiency: 0.5}}"])
    except ConfigError as exc:
        assert str(exc) == "sim.devices[mine].peak_tflops: is required here"
    else:
        raise AssertionError("a profile without peak_tflops loaded")
