"""A process moves STARTING -> READY -> DONE and nowhere else; a run's status is
written to summary.json as its plain value."""
import json

import pytest

from psgd.orchestrate.states import ChildState, RunStatus

S, R, D = ChildState.STARTING, ChildState.READY, ChildState.DONE


def test_a_process_moves_only_forward_along_the_documented_steps():
    assert S.to(R) is R and R.to(D) is D and R.to(R) is R and D.to(D) is D
    for here, there in [(S, D), (R, S), (D, R), (D, S)]:
        with pytest.raises(ValueError, match=f"cannot go from {here.value} to {there.value}"):
            here.to(there)
    assert (S.ready, R.ready, D.ready) == (False, True, True)


def test_statuses_are_their_plain_values_in_json():
    assert json.dumps({"status": RunStatus.INTERRUPTED}) == '{"status": "interrupted"}'
    assert [str(s) for s in RunStatus] == ["running", "ok", "failed", "interrupted", "time_limit"]
