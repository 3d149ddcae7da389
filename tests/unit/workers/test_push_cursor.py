"""PushCursor: the one seq/clock rule the client and the simulated worker share."""
from psgd.sim.executor import VirtualWorker
from psgd.workers.client import PSClient
from psgd.workers.push_cursor import PushCursor


def test_a_completed_push_moves_seq_and_clock_on_by_one_but_never_back():
    c = PushCursor()
    c.pushed(c.seq, c.clock)
    assert (c.seq, c.clock) == (1, 1)
    c.adopt([5, 7])          # a rejoin during the call moved the clock on
    c.joined(8)              # and a shard had applied seq 8
    c.pushed(1, 1)           # the push that was under way completes: nothing goes back
    assert (c.seq, c.clock) == (9, 5)


def test_the_lowest_shards_clock_wins_and_an_empty_answer_changes_nothing():
    c = PushCursor(clock=3)
    c.adopt([6, 4, 9])
    assert c.clock == 4
    c.adopt([2])
    assert c.clock == 4
    c.adopt([])
    assert c.clock == 4


def test_the_client_and_the_simulated_worker_keep_their_place_in_a_push_cursor():
    assert issubclass(VirtualWorker, PushCursor)
    assert isinstance(PSClient.clock, property) and isinstance(PSClient.seq, property)
