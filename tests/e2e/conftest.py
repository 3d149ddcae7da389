"""Every test collected under tests/e2e is e2e-marked here, so a new file cannot forget it
and `pytest -m "not e2e"` leaves the whole folder out."""
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection reads the marks
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
