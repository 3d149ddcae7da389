"""The sharing rules ps and rr give the results they gave before they re-timed their jobs incrementally, bit for bit."""
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from sharing_fingerprint import BOOKINGS, CASES, bookings_fingerprint, case_fingerprint  # noqa: E402

EXPECTED = json.loads((HERE / "data" / "sharing.json").read_text())


@pytest.mark.parametrize("name", sorted(BOOKINGS))
def test_every_jobs_end_after_each_booking_is_the_one_before(name):
    assert bookings_fingerprint(*BOOKINGS[name]) == EXPECTED["bookings"][name]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_on_a_shared_host_is_the_run_before(case):
    assert case_fingerprint(case) == EXPECTED["runs"][case]


def test_the_fingerprints_tell_the_cases_apart():
    assert len(set(EXPECTED["runs"].values())) == len(CASES)
    assert len(set(EXPECTED["bookings"].values())) == len(BOOKINGS)
