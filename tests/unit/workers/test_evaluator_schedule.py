"""The evaluator's timer: a fixed period from start to start, missed ticks skipped."""
import pytest

from psgd.workers.evaluator import next_deadline


def test_scoring_inside_the_period_does_not_stretch_it():
    # Due at 10.0, scored by 10.1: the next one is due one period after 10.0, not after 10.1.
    assert next_deadline(10.0, 0.25, now=10.1) == pytest.approx(10.25)


def test_an_overrun_starts_the_next_evaluation_at_once_without_a_burst():
    # Scoring took 0.6 s of a 0.25 s period: go again now, not three times to catch up.
    assert next_deadline(10.0, 0.25, now=10.6) == 10.6
    assert next_deadline(10.6, 0.25, now=10.7) == pytest.approx(10.85)
