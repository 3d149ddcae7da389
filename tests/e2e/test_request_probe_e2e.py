"""`psgd sim profile`'s request probe against a real shard process: both ends' CPU per request is found,
and with no parts charged beforehand all of it is kept."""
import pytest

from psgd.sim.profile_requests import measure_requests

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_the_request_probe_measures_both_ends_of_a_real_request():
    costs = measure_requests(lambda n: 0.0, lambda n: 0.0, (4096, 1 << 16), requests=24, repeats=1)
    assert costs.client.fixed_us > 0 and costs.shard.fixed_us > 0
    assert 0 < costs.client_send_share < 1 and costs.shard_wake_us >= 0
