"""Server update rules: one module per optimizer (sgd, momentum, adam, adamw,
adagrad, ...), each one class (psgd.core.rules.base.Rule) in one table checked at
import (psgd.core.rules.registry). A new rule is a new module here."""
from psgd.core.rules.base import RULES, Rule, UnsupportedOptimizer, rule
from psgd.core.rules.registry import rule_named

__all__ = ["RULES", "Rule", "UnsupportedOptimizer", "rule", "rule_named"]
