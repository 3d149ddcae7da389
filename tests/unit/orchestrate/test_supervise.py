"""Restart budget: bounded retries per process with exponential backoff."""
from psgd.config import SupervisionConfig
from psgd.orchestrate.supervise import RestartBudget


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
