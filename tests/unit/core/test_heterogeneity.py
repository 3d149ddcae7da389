"""Straggler models: exact fixed and transient delays, reproducible random ones
with the requested distribution."""
import numpy as np
import pytest

from psgd.core.heterogeneity import DelaySpec, StragglerModel, TransientSpec, describe


def test_fixed_multiplier_is_exact_and_needs_no_draws():
    m = StragglerModel.for_rank(3, seed=0, slowdown={3: 4.0})
    assert m.active
    assert [m.extra_s(0.01, t) for t in (0.0, 5.0, 100.0)] == [pytest.approx(0.03, abs=1e-15)] * 3
    other = StragglerModel.for_rank(2, seed=0, slowdown={3: 4.0})
    assert not other.active and other.extra_s(0.01, 1.0) == 0.0


def test_transient_slowdown_only_inside_its_window():
    tr = TransientSpec(rank=1, start_s=10.0, duration_s=5.0, factor=3.0)
    m = StragglerModel.for_rank(1, seed=0, transients=[tr])
    assert [m.extra_s(0.02, t) for t in (9.99, 10.0, 14.99, 15.0)] == [0.0, 0.04, 0.04, 0.0]
    assert not StragglerModel.for_rank(0, seed=0, transients=[tr]).active
    # stacks on a fixed multiplier
    both = StragglerModel.for_rank(1, seed=0, slowdown={1: 2.0}, transients=[tr])
    assert both.extra_s(0.02, 12.0) == pytest.approx(0.02 * (1 + 2))


def test_random_delays_are_reproducible_per_seed_and_rank():
    spec = DelaySpec("exponential", mean=0.5)

    def seq(rank, seed):
        m = StragglerModel.for_rank(rank, seed, delay=spec)
        return [m.draw() for _ in range(20)]
    assert seq(0, 7) == seq(0, 7)
    assert len(set(seq(0, 7))) == 20
    assert seq(0, 7) != seq(1, 7) and seq(0, 7) != seq(0, 8)


@pytest.fixture(scope="module")
def stats():
    """scipy.stats, imported by the tests that use it: imported at the top, every xdist worker
    paid its seconds at collection."""
    from scipy import stats
    return stats


def test_exponential_delays_have_the_requested_distribution(stats):
    m = StragglerModel.for_rank(0, seed=1, delay=DelaySpec("exponential", mean=0.5))
    x = np.array([m.draw() for _ in range(4000)])
    assert stats.kstest(x, "expon", args=(0, 0.5)).pvalue > 0.01
    assert stats.kstest(x, "expon", args=(0, 1.0)).pvalue < 1e-6  # the test can tell a wrong mean
    assert np.mean(x) == pytest.approx(0.5, rel=0.08)


def test_pareto_delays_are_heavy_tailed_with_the_requested_mean(stats):
    m = StragglerModel.for_rank(0, seed=2, delay=DelaySpec("pareto", mean=0.5, shape=3.0))
    x = np.array([m.draw() for _ in range(4000)])
    # Lomax(c=shape, scale) with scale chosen so the mean is 0.5: scale = 0.5 * (shape - 1)
    assert stats.kstest(x, "lomax", args=(3.0, 0, 1.0)).pvalue > 0.01
    assert np.mean(x) == pytest.approx(0.5, rel=0.1)
    heavy = StragglerModel.for_rank(0, seed=2, delay=DelaySpec("pareto", mean=0.5, shape=1.5))
    y = np.array([heavy.draw() for _ in range(4000)])
    expo = StragglerModel.for_rank(0, seed=2, delay=DelaySpec("exponential", mean=0.5))
    z = np.array([expo.draw() for _ in range(4000)])
    assert y.max() > 5 * z.max()  # the heavy tail produces far longer delays


def test_delay_scales_with_compute_and_respects_ranks():
    spec = DelaySpec("exponential", mean=1.0, ranks=(2,))
    m, ref = StragglerModel.for_rank(2, 5, delay=spec), StragglerModel.for_rank(2, 5, delay=spec)
    assert m.extra_s(0.03, 0.0) == pytest.approx(ref.draw() * 0.03)
    assert not StragglerModel.for_rank(1, 5, delay=spec).active


@pytest.mark.parametrize("kwargs,match", [
    (dict(dist="uniform"), "dist"), (dict(mean=-1.0), "mean"), (dict(dist="pareto", shape=1.0), "shape"),
    (dict(ranks=(-1,)), "ranks")])
def test_bad_delay_specs_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DelaySpec(**kwargs)


def test_bad_transient_and_slowdown():
    with pytest.raises(ValueError, match="factor"):
        TransientSpec(0, 1.0, 1.0, factor=0.5)
    with pytest.raises(ValueError, match="duration_s"):
        TransientSpec(0, 1.0, 0.0)
    with pytest.raises(ValueError, match="slowdown"):
        StragglerModel(0, 0, slowdown=0.5)


def test_describe_in_words():
    assert describe({}, None, ()) == "no straggler (all workers at their natural speed)"
    assert describe({3: 4.0}, None, ()) == "rank 3 slowed 4x"
    text = describe({}, DelaySpec("pareto", 1.0, 1.5), [TransientSpec(1, 5.0, 10.0, 2.0)])
    assert text == ("every rank delayed each step by a random pareto (shape 1.5) multiple of its compute time, "
                    "mean 1; rank 1 slowed 2x from 5s to 15s")


def test_straggler_from_a_workers_section():
    from types import SimpleNamespace as NS

    from psgd.core.heterogeneity import straggler_for
    workers = NS(slowdown={1: 2.0}, delay=NS(dist="exponential", mean=0.5, shape=1.5, ranks=[1]),
                 transient=[NS(rank=1, start_s=0.0, duration_s=1.0, factor=3.0)])
    m = straggler_for(workers, 1, seed=3)
    ref = StragglerModel.for_rank(1, 3, {1: 2.0}, DelaySpec("exponential", 0.5, 1.5, (1,)),
                                  [TransientSpec(1, 0.0, 1.0, 3.0)])
    assert m.extra_s(0.01, 0.5) == ref.extra_s(0.01, 0.5)
    assert not straggler_for(NS(slowdown={}), 0, 0).active
