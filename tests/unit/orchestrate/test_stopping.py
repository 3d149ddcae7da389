"""The order and the graces a run stops with (psgd.orchestrate.stopping.stop_in_order),
on stand-in processes: which roles each stage stops and how long it waits for them."""
from dataclasses import dataclass
from typing import Optional

import pytest

from psgd.config.modes import Role
from psgd.orchestrate.stopping import INTERRUPT_BUDGET_S, STOP_GRACE_S, stop_in_order


@dataclass
class Child:
    role: Role
    index: int = 0
    exit_code: Optional[int] = None

    def poll(self) -> Optional[int]:
        return self.exit_code

    def read_events(self) -> list[dict]:
        return []


class Host:
    """Records each stage: the roles asked to stop and the grace they were given."""

    def __init__(self):
        self.stages: list[tuple[list[Role], float]] = []

    def stop(self, group, grace_s):
        self.stages.append(([c.role for c in group], grace_s))
        return []

    def refresh(self, children):
        pass

    def collect(self, children):
        pass


def _stages(children, interrupted=False):
    host = Host()
    stop_in_order(host, children, interrupted, lambda child, event: None)
    return host.stages


def _run(server_exit_code=None):
    return [Child(Role.WORKER, 0), Child(Role.WORKER, 1), Child(Role.EVALUATOR),
            Child(Role.SERVER, 0, server_exit_code), Child(Role.SERVER, 1)]


def test_a_run_with_its_shards_up_waits_for_the_final_evaluation():
    assert _stages(_run()) == [([Role.WORKER, Role.WORKER], STOP_GRACE_S), ([Role.EVALUATOR], 3 * STOP_GRACE_S),
                               ([Role.SERVER, Role.SERVER], STOP_GRACE_S)]


@pytest.mark.parametrize("exit_code", [-9, 1, 0])
def test_a_run_that_lost_a_shard_gives_the_evaluator_the_interrupted_grace(exit_code):
    stages = _stages(_run(server_exit_code=exit_code))
    assert stages[1] == ([Role.EVALUATOR], 0.5 * INTERRUPT_BUDGET_S)
    assert stages[0][1] == stages[2][1] == STOP_GRACE_S  # the workers' and the shards' graces are unchanged


def test_an_interrupted_run_stops_workers_and_evaluator_together():
    assert _stages(_run(), interrupted=True) == [
        ([Role.WORKER, Role.WORKER, Role.EVALUATOR], 0.5 * INTERRUPT_BUDGET_S),
        ([Role.SERVER, Role.SERVER], 0.3 * INTERRUPT_BUDGET_S)]
