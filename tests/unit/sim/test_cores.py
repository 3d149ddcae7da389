"""A host's cores shared by processor sharing (sim.sharing: ps): each of k runnable jobs progresses at
min(1, cores / k), a role's jobs in turn, and an event that follows a job moves when later jobs slow it."""
import pytest

from psgd.config import ConfigError, load_config
from psgd.sim.cores import Cores, Due, SharedCores, TurnCores, cores_for, linux_slice_s
from psgd.sim.event_queue import EventQueue, Kind


def test_two_equal_jobs_on_one_core_both_finish_at_twice_their_work():
    cores = SharedCores(1)
    a, b = cores.book(0.0, 1.0, 0.0, "a"), cores.book(0.0, 1.0, 0.0, "b")
    assert a.end == b.end == 2.0


def test_three_jobs_on_two_cores_each_progress_at_two_thirds():
    cores = SharedCores(2)
    jobs = [cores.book(0.0, 1.0, 0.0, key) for key in "abc"]
    assert [j.end for j in jobs] == [pytest.approx(1.5)] * 3
    assert cores.busy_s == 3.0


def test_a_job_issued_later_slows_an_earlier_one_and_its_end_moves():
    cores = SharedCores(1)
    a = cores.book(0.0, 2.0, 0.0, "a")
    assert a.end == 2.0  # alone
    b = cores.book(1.0, 0.5, 1.0, "b")  # from 1 both at half a core: b's 0.5 takes 1 s, a's last 1 s takes 1.5
    assert b.end == pytest.approx(2.0) and a.end == pytest.approx(2.5)


def test_a_roles_jobs_run_one_after_another_and_fewer_jobs_than_cores_run_at_full_speed():
    cores = SharedCores(2)
    first, second = cores.book(0.0, 1.0, 0.0, "worker"), cores.book(0.0, 1.0, 0.0, "worker")
    assert (first.end, second.end) == (1.0, 2.0)
    assert SharedCores(4).run(3.0, 0.25) == 3.25


def test_fcfs_fixes_a_jobs_end_at_issue_and_ps_does_not():
    fcfs, ps = cores_for("fcfs", 1), cores_for("ps", 1)
    assert isinstance(fcfs, Cores) and isinstance(ps, SharedCores)
    assert fcfs.book(0.0, 1.0, 0.0, "a").final and not ps.book(0.0, 1.0, 0.0, "a").final


def test_an_event_that_follows_a_job_goes_back_to_the_jobs_new_end_and_keeps_its_flight_time():
    cores, q = SharedCores(1), EventQueue()
    leaves = Due(cores.book(0.0, 1.0, 0.0, "shard"))
    q.put(leaves.at + 0.25, Kind.REPLY, "reply", due=leaves.then(leaves.at + 0.25))
    q.put(1.5, Kind.ARRIVE, "push")
    cores.book(0.0, 1.0, 0.0, "worker")  # shares the core from 0: the shard's job ends at 2, not 1
    assert q.pop() == (1.5, Kind.ARRIVE, "push")
    assert q.pop() == (2.25, Kind.REPLY, "reply")


def test_the_sharing_rule_is_checked_by_name():
    assert load_config(None, ["sim.hosts={box: {cores: 2}}", "sim.sharing=ps"]).sim.sharing == "ps"
    with pytest.raises(ConfigError, match=r"sim\.sharing"):
        load_config(None, ["sim.sharing=lottery"])


def test_in_turns_jobs_shorter_than_a_slice_run_first_come_first_served_and_longer_ones_alternate():
    short = TurnCores(1, slice_s=2.0)
    assert [short.book(0.0, 1.0, 0.0, key).end for key in "ab"] == [1.0, 2.0]
    cores = TurnCores(1, slice_s=0.5)
    a, b = cores.book(0.0, 1.0, 0.0, "a"), cores.book(0.0, 1.0, 0.0, "b")
    assert (a.end, b.end) == (1.5, 2.0)  # a 0-0.5, b 0.5-1, a 1-1.5, b 1.5-2


def test_in_turns_a_woken_job_goes_before_the_one_whose_slice_just_ended():
    cores = TurnCores(1, slice_s=0.5)
    a = cores.book(0.0, 2.0, 0.0, "a")
    b = cores.book(1.0, 0.25, 1.0, "b")
    assert (b.end, a.end) == (1.25, 2.25)


def test_the_slice_is_linuxs_default_for_the_hosts_cores():
    assert [linux_slice_s(n) for n in (1, 2, 4, 8, 64)] == pytest.approx([0.75e-3, 1.5e-3, 2.25e-3, 3e-3, 3e-3])
    assert TurnCores(2).slice_s == 1.5e-3 and isinstance(cores_for("rr", 2), TurnCores)


def test_in_turns_a_role_that_never_blocked_keeps_its_core_for_the_rest_of_its_slice():
    cores = TurnCores(1, slice_s=1.0)
    first, second = cores.book(0.0, 0.25, 0.0, "a"), cores.book(0.0, 0.25, 0.0, "a")  # a's next job ready at once
    other = cores.book(0.0, 0.5, 0.0, "b")
    assert (first.end, second.end, other.end) == (0.25, 0.5, 1.0)
    cores = TurnCores(1, slice_s=1.0)
    cores.book(0.0, 0.25, 0.0, "a")
    other = cores.book(0.0, 0.5, 0.0, "b")
    following = cores.book(0.25, 0.25, 0.25, "a")  # issued the instant a's first job ended: it goes on
    assert (following.end, other.end) == (0.5, 1.0)
    later = cores.book(0.75, 0.25, 0.75, "a")  # a slept in between: it woke, and waits for b
    assert (other.end, later.end) == (1.0, 1.25)


def test_in_turns_a_woken_role_goes_ahead_of_those_whose_slice_ran_out_but_behind_those_woken_before():
    cores = TurnCores(1, slice_s=0.5)
    a, b = cores.book(0.0, 2.0, 0.0, "a"), cores.book(0.0, 1.0, 0.0, "b")
    c = cores.book(1.2, 0.25, 1.2, "c")  # b's slice ran out at 1.0 and it waits; c wakes while a runs
    d = cores.book(1.3, 0.25, 1.3, "d")
    assert (c.end, d.end, b.end, a.end) == (1.75, 2.0, 2.5, 3.5)


def test_in_turns_a_used_slice_is_noticed_at_the_next_tick():
    cores = TurnCores(1, slice_s=0.5, tick_s=2.0)
    a, b = cores.book(0.0, 1.5, 0.0, "a"), cores.book(0.0, 1.0, 0.0, "b")
    assert (a.end, b.end) == (1.5, 2.5)  # no tick before a's end: it runs on
    cores = TurnCores(1, slice_s=0.5, tick_s=2.0)
    a, b = cores.book(0.0, 3.0, 0.0, "a"), cores.book(0.0, 1.0, 0.0, "b")
    assert (b.end, a.end) == (3.0, 4.0)  # a preempted at the tick at 2; picked at 3, it ends before the tick at 4
