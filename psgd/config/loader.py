"""Builds frozen config dataclasses from plain YAML data, checking every key.

Kept apart from the schema in config.py so the schema reads as a list of
commented defaults. Errors carry the full dotted key path.
"""
from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Union

import yaml


class ConfigError(ValueError):
    """A config key is unknown or its value is invalid."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}" if key else reason)

    def prefixed(self, prefix: str) -> "ConfigError":
        key = f"{prefix}.{self.key}" if prefix and self.key else (prefix or self.key)
        if self.key.startswith("[") and prefix:
            key = prefix + self.key
        return ConfigError(key, self.reason)


class RenamedWord(ConfigError):
    """A value that was renamed: its error names the word now (and wins over a union's other readings)."""


# Literal value sets with renamed words: the set's values -> {old word: word now} (renamed_words).
_RENAMED: dict[tuple, dict[str, str]] = {}


def renamed_words(literal: Any, renamed: dict[str, str]) -> None:
    """Make `literal`'s check answer an old word with the word now (RenamedWord)."""
    _RENAMED[typing.get_args(literal)] = dict(renamed)


def parse_override(item: str) -> tuple[str, Any]:
    """'a.b=value' -> ('a.b', value parsed as YAML)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("", f"--set expects key.path=value, got {item!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(key, f"value {raw!r} is not valid YAML: {exc}") from None
    return key, value


def set_path(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(".".join(parts[: i + 1]), "is not a section, cannot set a key inside it")
        node = nxt
    node[parts[-1]] = value


def build(cls, data: Any, path: str):
    """Instantiate dataclass `cls` from `data`, recursively, validating types."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping, got {_kind(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    by_yaml = {(n[:-1] if n.endswith("_") else n): n for n in fields}
    kwargs = {}
    for key, value in data.items():
        sub = _join(path, str(key))
        if key not in by_yaml:
            renamed = getattr(cls, "RENAMED_KEYS", {}).get(key)
            if renamed:
                raise ConfigError(sub, renamed)
            known = ", ".join(sorted(by_yaml))
            raise ConfigError(sub, f"unknown key (known keys here: {known})")
        name = by_yaml[key]
        kwargs[name] = _convert(hints[name], value, sub)
        _check_int_bound(kwargs[name], fields[name].metadata.get("max", INT_MAX), sub)
    for name, f in fields.items():  # a key without a default (sim.devices.NAME.peak_tflops) must be given
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(_join(path, name[:-1] if name.endswith("_") else name), "is required here")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise exc.prefixed(path) from None


# Integer keys end up in C types (sizes, counts, socket options): none may exceed a signed
# 32-bit int unless its field names a smaller bound of its own (metadata={"max": N}).
INT_MAX = 2**31 - 1


def int_max(limit: int, **metadata) -> dict:
    """Field metadata for an integer key the code can honour only up to `limit`."""
    return {"max": limit, **metadata}


def _check_int_bound(value: Any, limit: int, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        return
    if value > limit:
        raise ConfigError(path, f"must be <= {limit}, got {value}")


def _convert(tp, value: Any, path: str):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        sections = [a for a in options if dataclasses.is_dataclass(a)]
        if isinstance(value, dict) and len(sections) == 1:
            options = sections  # a mapping can only be the section: its own error names the inner key
        if len(options) == 1:
            return _convert(options[0], value, path)
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path)
            except RenamedWord:
                raise
            except ConfigError as exc:
                errors.append(exc.reason)
        raise ConfigError(path, " or ".join(errors))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, bool):  # YAML 1.1 reads a bare off / on as a boolean
            value = "on" if value else "off"
        try:
            return tp(value)
        except ValueError:
            raise ConfigError(path, f"must be one of {', '.join(m.value for m in tp)}, got {value!r}") from None
    if origin is typing.Literal:
        if value not in args:
            now = _RENAMED.get(args, {}).get(value) if isinstance(value, str) else None
            if now is not None:
                raise RenamedWord(path, f"{value!r} is written {now!r}")
            raise ConfigError(path, f"must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"expected a list, got {_kind(value)}")
        return [_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping, got {_kind(value)}")
        return {_convert(args[0], k, f"{path}[{k}]"): _convert(args[1], v, f"{path}[{k}]")
                for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                return int(value)  # mapping keys such as slowdown ranks may arrive as strings
            raise ConfigError(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            value = _float_or_none(value)  # PyYAML reads "1e-10" (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"expected a number, got {value!r}")
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(path, f"must be finite, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {value!r}")
        return value
    raise ConfigError(path, f"unsupported type {tp}")  # schema bug, not user input


def _float_or_none(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value), repr(value))


def check(cond: bool, key: str, reason: str) -> None:
    if not cond:
        raise ConfigError(key, reason)
