"""Names every test that used more than half of its pytest-timeout limit, at
the end of the run: such a test fails on a machine twice as slow, so its
limit (or its cost) needs a look before it turns flaky."""
from __future__ import annotations

import pytest

MARGIN = 2.0  # a test should finish in at most 1/MARGIN of its timeout

_spent: dict[str, float] = {}
_limit: dict[str, float] = {}


def _timeout_of(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    if marker is not None and "timeout" in marker.kwargs:
        return float(marker.kwargs["timeout"])
    try:
        value = item.config.getini("timeout")  # pytest-timeout's default limit
    except ValueError:
        return None
    return float(value) if value else None


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item):
    limit = _timeout_of(item)
    if limit:  # rides on the reports, so it reaches the controller under pytest-xdist too
        item.user_properties.append(("timeout_s", limit))


def pytest_runtest_logreport(report):
    _spent[report.nodeid] = _spent.get(report.nodeid, 0.0) + report.duration
    for key, value in report.user_properties:
        if key == "timeout_s":
            _limit[report.nodeid] = float(value)


def pytest_terminal_summary(terminalreporter):
    close = sorted(((_spent[n], lim, n) for n, lim in _limit.items() if _spent.get(n, 0.0) * MARGIN > lim),
                   reverse=True)
    if not close:
        terminalreporter.write_line(f"timeout margin: every test finished within 1/{MARGIN:g} of its timeout")
        return
    terminalreporter.section(f"tests that used more than 1/{MARGIN:g} of their timeout")
    for spent, limit, nodeid in close:
        terminalreporter.write_line(f"{spent:7.1f} s of {limit:g} s  {nodeid}")
