"""psgd.core.modes: one class per consistency mode, checked where it is defined,
and every parameter-server mode covered."""
from enum import Enum

import pytest
import torch

from psgd.config.modes import Mode
from psgd.core.clocks import ClockBoard
from psgd.core.modes import BEHAVIOURS, ModeBehaviour, PushAction, behaviour_class, uncovered
from psgd.core.modes.base import ApplyOnArrival


def test_every_parameter_server_mode_has_exactly_its_class():
    assert set(BEHAVIOURS) == {m for m in Mode if m.on_servers}
    assert all(behaviour_class(mode).MODE is mode for mode in BEHAVIOURS)
    with pytest.raises(ValueError, match="without parameter servers"):
        behaviour_class(Mode.ALLREDUCE)


@pytest.mark.parametrize("lacking", ["BOUNDED", "pull_ready", "push_action", "count"])
def test_a_mode_class_lacking_a_part_is_refused_where_it_is_defined(lacking):
    parts = {"MODE": Mode.SSP, "BOUNDED": True,
             "pull_ready": lambda self, clock, staleness: True,
             "push_action": lambda self, staleness, max_drop: PushAction.APPLY,
             "count": ApplyOnArrival.count}
    del parts[lacking]
    before = dict(BEHAVIOURS)
    with pytest.raises(TypeError, match=f"lacks {lacking}"):
        type("Broken", (ModeBehaviour,), parts)
    assert BEHAVIOURS == before  # nothing half-registered


def test_a_mode_has_one_class_and_a_class_without_a_mode_is_a_shared_base():
    base = type("SharedBase", (ApplyOnArrival,), {"BOUNDED": True})
    assert base not in BEHAVIOURS.values()
    with pytest.raises(TypeError, match="two classes"):
        type("Second", (base,), {"MODE": Mode.SSP, "pull_ready": lambda self, clock, staleness: True})
    assert BEHAVIOURS[Mode.SSP].__name__ == "Ssp"


def test_a_mode_without_servers_cannot_have_a_rule():
    with pytest.raises(TypeError, match="without parameter servers"):
        type("Baseline", (ApplyOnArrival,), {"MODE": Mode.ALLREDUCE, "BOUNDED": False,
                                             "pull_ready": lambda self, clock, staleness: True})


def test_an_enum_member_without_a_class_is_named():
    class Modes(str, Enum):  # Mode with one member more, as a new mode's enum value before its file
        SSP = "ssp"
        ASP = "asp"
        LOCKSTEP = "lockstep"

        @property
        def on_servers(self) -> bool:
            return True

    assert uncovered(Modes) == ["lockstep"]
    assert uncovered(Mode) == []


def test_each_rule_decides_its_pulls_and_pushes():
    board = ClockBoard(2)
    board.clocks[:] = [3, 1]
    assert behaviour_class(Mode.ASP)(board, 1).pull_ready(9, 0)
    ssp = behaviour_class(Mode.SSP)(board, 1)
    assert ssp.pull_ready(3, 2) and not ssp.pull_ready(4, 2)
    assert ssp.push_action(5, 4) is PushAction.DROP_STALE and ssp.push_action(4, 4) is PushAction.APPLY
    bsp = behaviour_class(Mode.BSP)(board, 2)
    assert bsp.push_action(99, 0) is PushAction.AGGREGATE
    assert not bsp.pull_ready(1, 0) and bsp.push_refusal(1) is not None and bsp.push_refusal(0) is None
    board.clocks[:] = [0, 0]
    assert not bsp.count(0, 0, torch.tensor([1.0, 3.0]), 2).late and bsp.due() is None
    assert not bsp.count(1, 0, torch.tensor([3.0, 5.0]), 4).late
    update = bsp.due()
    assert torch.equal(update.grad, torch.tensor([2.0, 4.0])) and update.staleness == [2, 4]
    assert bsp.pull_ready(1, 0) and bsp.progress() == 1 and bsp.join_clock() == 1
    assert bsp.count(0, 0, torch.tensor([1.0, 1.0]), 0).late  # clock 0 was applied already
