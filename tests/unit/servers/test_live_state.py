"""A shard's live settings without sockets: the learning rate and bound in
force per clock, the two-phase hold, the run token, and the adaptive bound
deciding from pushed step times."""
import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.servers.live_control import ControlError
from psgd.servers.state import ShardState

TOKEN = "s3cret"


def make_state(workers=2, numel=2, **over):
    sets = ["consistency.mode=ssp", f"cluster.workers={workers}", "optimizer.lr=0.5",
            "cluster.timeout_s=5", "cluster.heartbeat_s=1"]
    sets += [f"{k}={v}" for k, v in over.items()]
    state = ShardState(load_config(None, sets), 0, torch.zeros(numel), run_token=TOKEN)
    for rank in range(workers):
        state.register(rank, now=0.0)
    return state


def g(*values):
    return torch.tensor(values, dtype=torch.float32)


def ctl(st, op, settings=None, clock=0, token=TOKEN, now=0.0):
    return st.live.control(op, token, clock, settings or {}, now)


def step_all(st, clock, step_s=0.01, slow=None):
    """Every worker pushes `clock` (rank `slow` reporting 5x the step time) and pulls clock + 1."""
    for r in range(st.workers):
        st.push(r, clock, clock, st.version, g(0, 0), step_s=step_s * (5 if r == slow else 1))
    for r in range(st.workers):
        assert st.pull_ready(r, clock + 1)
        st.answer_pull(r, clock + 1)


def test_a_committed_lr_applies_to_gradients_of_the_effective_clock_on():
    st = make_state(**{"consistency.staleness": 3})
    assert ctl(st, "prepare", {"optimizer.lr": "0.1"}) == (0, {})   # nothing answered yet: holds clock 0 on
    clock, setting = ctl(st, "commit", {"optimizer.lr": "0.1"}, clock=1)
    assert clock == 1 and setting["lr"] == 0.1
    st.push(0, 0, 0, 0, g(1, 0))                 # clock 0: old lr 0.5
    st.push(0, 1, 1, 1, g(1, 0))                 # clock 1: new lr 0.1
    st.push(1, 0, 0, 0, g(0, 1))                 # clock 0 arriving late: still 0.5
    assert torch.allclose(st.params, g(-0.6, -0.5))


def test_prepare_holds_pulls_until_commit_and_the_bound_changes_at_one_clock():
    st = make_state(**{"consistency.staleness": 0})
    step_all(st, 0)                                # both workers at clock 1
    held, _ = ctl(st, "prepare", {"consistency.staleness": "2"})
    assert held == 2                               # clock 1 was answered, 2 is the first unanswered
    st.push(1, 1, 1, st.version, g(0, 0))
    st.push(0, 1, 1, st.version, g(0, 0))          # both at clock 2
    assert not st.pull_ready(0, 2)                 # held while the change is agreed
    ctl(st, "commit", {"consistency.staleness": "2"}, clock=3)   # another shard held clock 3
    assert st.pull_ready(0, 2) and st.pull_ready(1, 2)
    st.answer_pull(0, 2)
    st.push(0, 2, 2, st.version, g(0, 0))          # worker 0 at 3, worker 1 at 2
    assert st.pull_ready(0, 3)                     # bound 2 from clock 3 on
    st.answer_pull(0, 3)
    st.push(0, 3, 3, st.version, g(0, 0))
    st.answer_pull(0, 4)                           # gap 2: allowed
    st.push(0, 4, 4, st.version, g(0, 0))
    assert not st.pull_ready(0, 5)                 # gap 3 > 2
    live = st.stats()["live"]
    assert live["pulls_by_bound"] == {"0": 3, "2": 2} and live["max_gap_over_bound"] == 0
    assert live["setting"]["bound"] == 2 and [c["clock"] for c in live["changes"]] == [3]


def test_an_uncommitted_hold_expires():
    st = make_state(**{"consistency.staleness": 1})
    ctl(st, "prepare", {"consistency.staleness": "3"}, now=0.0)
    assert not st.pull_ready(0, 0)
    assert st.live.expire(now=100.0)
    assert st.pull_ready(0, 0)
    with pytest.raises(ControlError, match="not_prepared"):
        ctl(st, "commit", {"consistency.staleness": "3"}, clock=1)
    assert st.policy.setting_at(50).bound == 1


@pytest.mark.parametrize("token", ["", "S3CRET", "s3cret ", None])
def test_a_wrong_token_is_refused_and_changes_nothing(token):
    st = make_state(**{"consistency.staleness": 1})
    with pytest.raises(ControlError) as exc:
        ctl(st, "prepare", {"consistency.staleness": "3"}, token=token)
    assert exc.value.code == "bad_token" and st.policy.settings.hold is None
    st = ShardState(st.cfg, 0, torch.zeros(2))     # a shard started without a run directory
    with pytest.raises(ControlError, match="no_token"):
        ctl(st, "show")


def test_bad_changes_are_refused_before_anything_is_held():
    st = make_state(**{"consistency.staleness": 1})
    for settings, code in (({"consistency.staleness": "-2"}, "bad_value"), ({"cluster.workers": "9"}, "bad_key"),
                           ({}, "bad_value")):
        with pytest.raises(ControlError) as exc:
            ctl(st, "prepare", settings)
        assert exc.value.code == code and st.policy.settings.hold is None
    with pytest.raises(ControlError, match="bad_op"):
        ctl(st, "restart", {"consistency.staleness": "2"})


def test_auto_widens_for_a_slow_worker_and_all_shards_decide_alike():
    over = {"consistency.staleness": "auto", "consistency.staleness_min": 0, "consistency.staleness_max": 6}
    a, b = make_state(workers=3, **over), make_state(workers=3, **over)
    events = {id(a): [], id(b): []}
    for st in (a, b):
        st.report_to(lambda event, _st=st, **f: events[id(_st)].append((event, f)))
    for clock in range(24):
        for st in (a, b):
            step_all(st, clock, slow=2)
    assert events[id(a)] == events[id(b)]
    (name, first), = events[id(a)][:1]
    # rank 2 reports 5x: ceil(5 - 1.5) = 4, decided at the first full window (clock 12),
    # effective at 12 + 2 + the bound in force (0)
    assert name == "setting_change" and first["laggard"] == 2
    assert (first["decided_at_clock"], first["effective_clock"], first["bound"]) == (12, 14, 4)
    assert a.policy.setting_at(13).bound == 0 and a.policy.setting_at(14).bound == 4
    assert len(events[id(a)]) == 1                 # no repeated decision while the change was pending


def test_auto_is_refused_outside_ssp_and_limits_are_checked():
    with pytest.raises(ConfigError, match="consistency.staleness"):
        load_config(None, ["consistency.mode=asp", "consistency.staleness=auto"])
    with pytest.raises(ConfigError, match="consistency.staleness_max"):
        load_config(None, ["consistency.mode=ssp", "consistency.staleness_min=3", "consistency.staleness_max=2"])


def test_the_live_lr_starts_from_the_update_rules_lr():
    # A shard that scales the configured rate (e.g. linear scaling for bsp)
    # must not have it reset to the configured one by the live settings.
    from psgd.core.modes.policy import ConsistencyPolicy
    cfg = load_config(None, ["consistency.mode=ssp", "optimizer.lr=0.1", "optimizer.lr_scaling=linear"])
    assert ConsistencyPolicy.from_config(cfg, lr=0.4).lr_at(0) == 0.4
    st = make_state()
    st.push(0, 0, 0, 0, g(1, 0))
    assert st.rule.cfg.lr == 0.5 and torch.allclose(st.params, g(-0.5, 0))


def test_stats_list_only_recent_changes():
    from psgd.servers.live_control import RECENT_CHANGES
    st = make_state(**{"consistency.staleness": 1})
    for k in range(RECENT_CHANGES + 5):
        st.policy.settings.schedule(10 + k, {"staleness": k % 3}, "auto")
    live = st.stats()["live"]
    assert live["changes_total"] == RECENT_CHANGES + 5 and len(live["changes"]) == RECENT_CHANGES
    assert live["changes"][-1]["clock"] == 10 + RECENT_CHANGES + 4
