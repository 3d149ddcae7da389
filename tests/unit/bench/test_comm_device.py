"""`psgd bench comm --device`'s rows: medians in ms, every ratio from those medians."""
import pytest

from psgd.bench.comm_device import DEVICE_PEERS, _row, device_comm_table


def test_a_row_gives_medians_and_ratios_of_the_same_run():
    # seconds per round trip, three repeats each; medians 4, 6, 3, 1 and 2 ms
    times = {"psgd": [0.004, 0.003, 0.009], "psgd_pageable": [0.006, 0.006, 0.001], "psgd_host": [0.003, 0.003, 0.01],
             "copies_pinned": [0.001, 0.002, 0.0005], "copies_pageable": [0.002, 0.002, 0.002]}
    assert set(times) == set(DEVICE_PEERS)
    row = _row(1 << 20, 1, times, rpc=[0.010, 0.012, 0.008], staging={"pinned": True, "pageable_is_pinned": False})
    assert (row["psgd_ms"], row["psgd_pageable_ms"], row["psgd_host_ms"]) == pytest.approx((4.0, 6.0, 3.0))
    assert (row["copies_pinned_ms"], row["torch_rpc_ms"]) == pytest.approx((1.0, 10.0))
    assert row["staging_ms"] == pytest.approx(1.0)  # psgd from the device less psgd from the host
    assert row["psgd_over_copies_pinned"] == pytest.approx(4.0)
    assert row["psgd_pageable_over_psgd"] == pytest.approx(1.5)
    assert row["torch_rpc_over_psgd"] == pytest.approx(2.5)
    assert row["repeats"] == 3 and row["pinned"] is True
    table = device_comm_table({"device": "cuda", "device_name": "GPU", "torch": "x", "repeats": 3, "rows": [row]})
    assert table[-1].startswith("| 1048576 | 1 | 4.000 | 6.000 | 3.000 | 1.000 | 2.000 | 10.000 | 2.50 | 4.00 |")
