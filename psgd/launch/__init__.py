"""Orchestration: the role table, the local launcher, cluster runs, discovery, collect, summary."""
