"""Without sim.hosts the time model is the one before hosts existed: the same runs, bit for bit."""
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from no_hosts_fingerprint import MODES, config, fingerprint  # noqa: E402

EXPECTED = json.loads((HERE / "data" / "no_hosts.json").read_text())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_run_without_hosts_is_the_run_before_hosts(mode):
    # the expected fingerprint was computed by this same function on the commit before hosts
    assert fingerprint(mode) == EXPECTED["fingerprints"][mode]


def test_the_fingerprints_tell_the_modes_apart():
    assert len(set(EXPECTED["fingerprints"].values())) == len(MODES)
    assert config("bsp").sim.hosts == {}
