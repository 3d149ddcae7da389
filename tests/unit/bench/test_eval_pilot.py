"""The evaluation spacing a bench's pilot chooses (psgd.bench.eval_pilot)."""
from psgd.bench.eval_pilot import EVALS_BEFORE_TARGET, EVALS_PER_PILOT_TARGET, choose_spacing, user_sets_spacing


def test_a_coarse_pilot_lowers_the_spacing_and_runs_again():
    # Evaluated every 1 s, the fastest pilot held its target at its first evaluations: measured coarsely.
    every, again = choose_spacing(1.0, 0.15)
    assert every == 0.15 / EVALS_PER_PILOT_TARGET and again


def test_a_fine_enough_pilot_sets_the_spacing_once():
    # 30 evaluations before the target: the time is well measured, but the spacing is finer still.
    every, again = choose_spacing(0.01, 30 * 0.01)
    assert every == 30 * 0.01 / EVALS_PER_PILOT_TARGET and not again
    assert 30 >= EVALS_BEFORE_TARGET


def test_a_spacing_already_dense_enough_and_a_pilot_that_never_held_keep_it():
    assert choose_spacing(0.01, EVALS_PER_PILOT_TARGET * 0.01) == (0.01, False)
    assert choose_spacing(0.5, None) == (0.5, False)


def test_only_a_spacing_set_on_the_command_line_counts_as_the_users():
    assert user_sets_spacing(["cluster.workers=4", "eval.every_s=0.2"])
    assert user_sets_spacing([" eval.every_s = 0.2"])
    assert not user_sets_spacing(["eval.enabled=true", "cluster.launcher=sim"])
