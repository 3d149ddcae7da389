"""The shard's zero-copy reply path: parameters handed to an in-flight send are
never changed underneath it (copy-on-write), replies are never torn, and the
one-pass non-finite check is exact."""
import torch

from psgd.config import load_config
from psgd.core.update_rules import all_finite
from psgd.servers.state import ShardState


class FakeTracker:
    def __init__(self, done: bool):
        self.done = done
        self.waited = 0

    def wait(self, timeout_s: float) -> bool:
        self.waited += 1
        return self.done


def _state(n=8):
    cfg = load_config(None, ["cluster.workers=1", "consistency.mode=asp", "optimizer.lr=1.0"])
    st = ShardState(cfg, 0, torch.zeros(n))
    st.register(0, 0.0)
    return st


def test_update_during_an_in_flight_reply_copies_instead_of_tearing_it():
    st = _state()
    sent = st.live_params()
    busy = FakeTracker(done=False)
    st.sending(busy)
    st.push(0, 0, 0, 0, torch.ones(8))
    assert busy.waited == 1
    assert torch.equal(sent, torch.zeros(8))            # what the send reads is untouched
    assert torch.equal(st.params, -torch.ones(8))       # the update went to a copy
    assert st.counters["copy_on_write"] == 1


def test_update_after_the_reply_was_released_is_in_place():
    st = _state()
    sent = st.live_params()
    finishing = FakeTracker(done=False)
    st.sending(finishing)
    finishing.done = True                                # released while the update waited
    st.push(0, 0, 0, 0, torch.ones(8))
    assert st.params.data_ptr() == sent.data_ptr()
    assert torch.equal(st.params, -torch.ones(8))
    assert st.counters["copy_on_write"] == 0
    st.sending(FakeTracker(done=True))                   # already done: not even kept
    assert st._in_flight == []


def test_all_finite_is_exact():
    assert all_finite(torch.randn(1000))
    assert all_finite(torch.full((10,), 3e38))          # the sum overflows; the exact check still passes it
    for poison in (float("nan"), float("inf"), float("-inf")):
        t = torch.randn(1000)
        t[517] = poison
        assert not all_finite(t)
    t = torch.zeros(4)
    t[0], t[1] = float("inf"), float("-inf")            # inf - inf = nan in the sum: still caught
    assert not all_finite(t)
