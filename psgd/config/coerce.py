"""One entry for every way a user hands psgd a config: a Config, a YAML path or a mapping."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence, Union

from psgd.config.schema import Config, load_config, override_config

__all__ = ["ConfigLike", "as_config"]

ConfigLike = Union[Config, str, Path, Mapping[str, Any]]


def as_config(source: ConfigLike, overrides: Sequence[str] = ()) -> Config:
    """A validated Config from `source`, with `key.path=value` overrides applied.
    Raises ConfigError naming the key on any unknown key or bad value."""
    if isinstance(source, Config):
        return override_config(source, list(overrides))
    if isinstance(source, Mapping):
        return load_config(None, list(overrides), data=dict(source))
    if isinstance(source, (str, Path)):
        return load_config(source, list(overrides))
    raise TypeError(f"a config is a psgd Config, a YAML path or a mapping, got {type(source).__name__}")
