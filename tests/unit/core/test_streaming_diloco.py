"""Streaming DiLoCo's schedule and settings (psgd.core.local_methods.streaming_diloco) and
its worker-side rounds (psgd.workers.fragment_rounds)."""
import pytest
import torch
from torch import nn

from psgd.config import ConfigError, load_config
from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods.streaming_diloco import StreamingDiLoCo, fragment_shards
from psgd.core.sharding import layout_for_module
from psgd.workers.fragment_rounds import FragmentRounds
from psgd.workers.model_sync import ModelSync
from tests.support.local_methods import method_of


def test_each_fragment_syncs_once_per_round_on_torchft_s_staggered_schedule():
    method = method_of(LocalConfig(steps=8, fragments=4, outer_momentum=0.9), workers=2)
    assert isinstance(method, StreamingDiLoCo)
    sends = {t: method.sends_after(t) for t in range(1, 17)}
    assert {t: f for t, f in sends.items() if f} == {2: [0], 4: [1], 6: [2], 8: [3], 10: [0], 12: [1], 14: [2],
                                                      16: [3]}
    one = method_of(LocalConfig(steps=8, fragments=1, outer_momentum=0.9), workers=2)
    assert [t for t in range(1, 17) if one.sends_after(t)] == [8, 16]  # where DiLoCo pushes


def test_fragments_deal_the_shards_round_robin():
    assert fragment_shards(2, 5) == [[0, 2, 4], [1, 3]]
    assert fragment_shards(1, 3) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="need 1..2"):
        fragment_shards(3, 2)


def test_the_outer_rule_is_diloco_s_or_delayed_nesterov_s():
    workers = 4
    sync = method_of(LocalConfig(steps=8, fragments=2, outer_momentum=0.9), workers)
    live = method_of(LocalConfig(steps=8, fragments=2, outer_momentum=0.9, delayed_nesterov=True), workers)
    assert (sync.momentum_period(), sync.push_share(False), sync.push_share(True)) == (1, 1.0, 1 / workers)
    assert (live.momentum_period(), live.push_share(True)) == (workers, 1.0)


@pytest.mark.parametrize("sets, key", [
    (["local.steps=8", "local.fragments=2", "local.fragment_sync_delay=4"], "local.fragment_sync_delay"),
    (["local.steps=8", "local.fragment_update_alpha=0.5"], "local.fragment_update_alpha"),
    (["local.steps=8", "local.fragments=3"], "local.fragments"),  # 2 servers
    (["local.steps=2", "local.fragments=3", "cluster.servers=4"], "local.fragments"),  # more than steps
    (["local.steps=8", "local.fragments=2", "local.dynamic=true"], "local.fragments"),
    (["local.steps=8", "local.fragments=2", "local.fragment_update_alpha=1.5"], "local.fragment_update_alpha"),
])
def test_impossible_settings_are_refused_naming_the_key(sets, key):
    with pytest.raises(ConfigError, match=key):
        load_config(None, ["cluster.servers=2", "consistency.mode=bsp", *sets])


def _rounds(alpha, delay=0):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    layout = layout_for_module(model, 2)
    sync = ModelSync(model, layout, torch.device("cpu"), pin_memory=False)
    method = method_of(LocalConfig(steps=4, fragments=2, outer_momentum=0.9, fragment_sync_delay=delay,
                                    fragment_update_alpha=alpha), workers=1)
    return FragmentRounds(method, sync, torch.optim.SGD(model.parameters(), lr=0.1), 2), model


def _train_step(model):
    model.zero_grad()
    model(torch.ones(1, 3)).sum().backward()


def test_a_landing_fragment_mixes_local_and_synced_by_alpha_and_the_next_delta_starts_from_the_synced():
    rounds, model = _rounds(alpha=0.25, delay=1)
    begin = [t.clone() for t in rounds.start]
    for _ in range(2):
        _train_step(model)
        rounds.step()
    assert rounds.sends_due() == [0] and rounds.merge_due() is None
    deltas, steps = rounds.delta(0)
    local = rounds.sync.flat_params()
    assert steps == 2 and set(deltas) == set(rounds.shards[0])
    assert all(torch.equal(deltas[s], begin[s] - local[s]) for s in deltas)
    _train_step(model)
    rounds.step()  # tau = 1: it lands after this step
    assert rounds.merge_due() == 0
    own = rounds.sync.flat_params()
    synced = {s: torch.full_like(own[s], 0.5) for s in rounds.shards[0]}
    rounds.merge(0, synced)
    after = rounds.sync.flat_params()
    for s in rounds.shards[0]:
        assert torch.equal(after[s], torch.lerp(synced[s], own[s], 0.25))
        assert torch.equal(rounds.start[s], synced[s])
    for s in rounds.shards[1]:  # the other fragment is untouched: it keeps training from its start
        assert torch.equal(after[s], own[s]) and torch.equal(rounds.start[s], begin[s])


def test_a_second_fragment_cannot_leave_while_one_is_in_flight():
    rounds, _ = _rounds(alpha=0.0)
    rounds.delta(0)
    with pytest.raises(RuntimeError, match="still in flight"):
        rounds.delta(1)
