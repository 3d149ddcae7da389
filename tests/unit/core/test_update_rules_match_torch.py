"""Server update rules equal torch.optim given the same gradients, on flat tensors and through real shards."""
import pytest
import torch
from optim_reference import RULES, grads_sequence

from psgd.config import load_config
from psgd.core.rules.updater import ShardUpdater


@pytest.mark.parametrize("name", sorted(RULES))
def test_flat_rule_matches_torch_optim(name):
    sets, make_opt = RULES[name]
    cfg = load_config(None, sets)
    start = torch.randn(257, generator=torch.Generator().manual_seed(1))
    ours = start.clone()
    rule = ShardUpdater(cfg.optimizer, ours)
    ref = torch.nn.Parameter(start.clone())
    opt = make_opt([ref])
    for g in grads_sequence(30, 257):
        rule.apply(ours, g)
        ref.grad = g.clone()
        opt.step()
    torch.testing.assert_close(ours, ref.detach(), rtol=1e-6, atol=1e-6)
