"""Restart budget: bounded retries per process with exponential backoff."""
from psgd.config import SupervisionConfig
from psgd.core.restarts import RestartBudget, after_training


def test_backoff_doubles_and_budget_is_per_process():
    budget = RestartBudget(SupervisionConfig(max_restarts=2, backoff_s=0.5))
    first = budget.schedule("server", 0, now=10.0, address="127.0.0.1:5")
    second = budget.schedule("server", 0, now=20.0)
    assert (first.due, first.address, second.due) == (10.5, "127.0.0.1:5", 21.0)
    assert budget.schedule("server", 0, now=30.0) is None
    assert budget.schedule("worker", 0, now=30.0).due == 30.5
    assert budget.total == 3 and budget.used("server", 0) == 2


def test_allreduce_workers_and_zero_budget_are_not_restarted():
    assert RestartBudget(SupervisionConfig(max_restarts=3)).schedule("allreduce", 0, 0.0) is None
    assert RestartBudget(SupervisionConfig(max_restarts=0)).schedule("worker", 1, 0.0) is None


def test_the_backoff_starts_again_once_a_process_ran_healthily_for_backoff_reset_s():
    budget = RestartBudget(SupervisionConfig(max_restarts=9, backoff_s=0.5, backoff_reset_s=10.0))
    dues = [budget.schedule("worker", 0, now=t).due for t in (0.0, 1.0, 3.0)]  # crashes right after each restart
    assert dues == [0.5, 2.0, 5.0]                                         # 0.5, 1, 2 s: doubling
    assert budget.delay_s("worker", 0, now=14.9) == 4.0                    # 9.9 s after its restart: not yet
    assert budget.schedule("worker", 0, now=15.0).due == 15.5              # 10 s after it: 0.5 s again
    assert budget.schedule("worker", 0, now=16.0).due == 17.0              # and doubling from there
    assert budget.used("worker", 0) == 5


def test_a_worker_restart_due_at_or_after_the_end_of_training_is_not_made():
    assert after_training("worker", due=120.0, training_ends=120.0)
    assert not after_training("worker", due=119.9, training_ends=120.0)
    assert not after_training("server", due=130.0, training_ends=120.0)   # the shards serve the final evaluation
    assert not after_training("worker", due=130.0, training_ends=None)     # training has not started
