"""Fingerprints of simulated runs on one shared 2-core host, to hold the sharing rules' bookkeeping to its results.

`python tests/unit/sim/sharing_fingerprint.py > tests/unit/sim/data/sharing.json` wrote the expected
figures on the commit before the rules `ps` and `rr` stepped through each role's first job alone
(06cded5; the new bookkeeping matched them all); the runs were recorded again when a shard's thread
came to send a request's replies before taking the next (the bookings did not change), and `rr`'s again
when it came to follow EEVDF (a role that never blocked keeps its slice, a woken one waits ahead of those
whose slice ran out, a used slice ends at the tick; `ps` unchanged).
test_sharing_exact.py recomputes them on this code. A fingerprint is no_hosts_fingerprint's (every event, times to the last bit, and the final
parameters) of a run with every role on one host of 2 cores.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from no_hosts_fingerprint import fingerprint  # noqa: E402

# A frozen copy of a shipped profile: measuring cpu-reference again must not move what these runs check.
PROFILE = Path(__file__).resolve().parent / "data" / "cpu-reference-2026-11-29.json"
HOST = ["sim.hosts={box: {cores: 2}}", f"sim.host_profile={PROFILE}"]
CASES = {f"{mode}-{sharing}": [*HOST, f"sim.sharing={sharing}"]
         for mode in ("bsp", "asp", "ssp") for sharing in ("ps", "rr")}


def case_fingerprint(case: str) -> str:
    return fingerprint(case.split("-")[0], CASES[case])


def bookings_fingerprint(sharing: str, seed: int, cores: int = 2, jobs: int = 150) -> str:
    """Random bookings (6 roles, jobs of 0.05-4 ms, some ready later, `now` moving on about as fast as 2 cores work) on `cores`
    cores: every job's end as read after each booking, to the last bit."""
    import hashlib
    import random

    from psgd.sim.cores import cores_for
    rng, host = random.Random(seed), cores_for(sharing, cores)
    now, booked, seen = 0.0, [], []
    for _ in range(jobs):
        now += rng.choice((0.0, 0.0, rng.uniform(0, 3e-3)))
        ready = now + rng.choice((0.0, 0.0, rng.uniform(0, 3e-3)))
        booked.append(host.book(ready, rng.uniform(5e-5, 4e-3), now, rng.randrange(6)))
        seen.append(repr([j.end for j in booked[-12:]]))
    return hashlib.sha256("".join(seen).encode()).hexdigest()


BOOKINGS = {f"{sharing}-{cores}-{seed}": (sharing, seed, cores) for sharing in ("ps", "rr")
            for cores in (1, 2, 4) for seed in (0, 1)}


if __name__ == "__main__":
    print(json.dumps({"runs": {case: case_fingerprint(case) for case in CASES},
                      "bookings": {name: bookings_fingerprint(*args) for name, args in BOOKINGS.items()}}, indent=1))
