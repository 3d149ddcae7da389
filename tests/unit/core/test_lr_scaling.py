"""Linear learning-rate scaling: which modes scale, and by how much."""
from dataclasses import dataclass
from types import SimpleNamespace as NS

from psgd.config import Mode
from psgd.core.lr_scaling import lr_factor, scaled_optimizer


@dataclass(frozen=True)
class Opt:
    lr: float
    lr_scaling: str


def cfg(mode, scaling="linear", workers=4, backup=0):
    return NS(optimizer=Opt(0.1, scaling), consistency=NS(mode=Mode(mode), backup_workers=backup),
              cluster=NS(workers=workers))


def test_synchronous_modes_scale_by_the_gradients_averaged():
    assert lr_factor(cfg("bsp")) == 4 and lr_factor(cfg("allreduce")) == 4
    assert lr_factor(cfg("bsp", backup=1)) == 3
    assert scaled_optimizer(cfg("bsp")).lr == 0.1 * 4


def test_asynchronous_modes_and_no_scaling_keep_the_rate():
    for mode in ("ssp", "asp"):
        c = cfg(mode)
        assert lr_factor(c) == 1 and scaled_optimizer(c) is c.optimizer
    c = cfg("bsp", scaling="none")
    assert lr_factor(c) == 1 and scaled_optimizer(c).lr == 0.1
