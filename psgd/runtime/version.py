"""psgd's version, written once: pyproject.toml reads it (setuptools' attr), `psgd --version`
prints it, and every run's summary.json and `psgd doctor` record it. Kept in the lowest layer a
process reports from, so every layer may import it; `psgd.__version__` is the same value."""

VERSION = "0.1.0"
