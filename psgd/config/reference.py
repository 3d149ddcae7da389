"""The configuration reference: every key of the config tree with its type, its default and the
comments the schema gives it in its source. The docs render it at build time (docs/hooks.py),
so the reference is the schema itself and cannot drift from it."""
from __future__ import annotations

import ast
import dataclasses
import enum
import html
import inspect
import io
import tokenize
import types
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional, Union

import yaml

__all__ = ["KeyDoc", "Section", "config_sections", "field_comments", "render_markdown", "key_html", "KEY_CLASS"]

KEY_CLASS = "config-key"  # docs/stylesheets/extra.css lets such a key break only at its <wbr>


@dataclass(frozen=True)
class KeyDoc:
    key: str      # the YAML path, e.g. "cluster.timeout_s"; a list's items as "workers.transient[].rank"
    type: str     # what a value may be, e.g. "int", "ssp or asp"
    default: str  # the default as YAML text
    comment: str  # the schema's comments on the field, joined


@dataclass(frozen=True)
class Section:
    path: str           # "" for the top level, else the YAML path of the section
    intro: str          # the comment on the field that holds the section, and the class docstring
    keys: tuple[KeyDoc, ...]


def config_sections(root: Optional[type] = None) -> list[Section]:
    """Every section of the config tree, depth first, each with its keys in schema order."""
    if root is None:
        from psgd.config.schema import Config
        root = Config
    found: list[Section] = []
    _walk(root, "", "", found)
    return found


def _walk(cls: type, path: str, intro: str, found: list[Section]) -> None:
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    doc = inspect.getdoc(cls) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
    keys, nested = [], []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = _join(path, f.name[:-1] if f.name.endswith("_") else f.name)
        inner, suffix = _section_type(hints[f.name])
        comment = comments.get(f.name, "")
        if inner is not None and f.default_factory is inner:  # always present: a heading, not a key
            nested.append((inner, key, comment))
            continue
        keys.append(KeyDoc(key, type_text(hints[f.name]), default_text(f), comment))
        if inner is not None:
            nested.append((inner, key + suffix, comment))
    found.append(Section(path, " ".join(t for t in (intro, doc) if t), tuple(keys)))
    for inner, key, comment in nested:
        _walk(inner, key, comment, found)


def _section_type(tp) -> tuple[Optional[type], str]:
    """The dataclass a field holds (itself, optional, a list or a mapping of them) and the path suffix."""
    if dataclasses.is_dataclass(tp):
        return tp, ""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    sections = [a for a in args if dataclasses.is_dataclass(a)]
    if typing.get_origin(tp) in (Union, types.UnionType) and len(sections) == 1:  # optional, or a value or a section
        return sections[0], ""
    if typing.get_origin(tp) is list and args and dataclasses.is_dataclass(args[0]):
        return args[0], "[]"
    if typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return args[1], ".<name>"  # a mapping of named sections (sim.devices)
    return None, ""


def type_text(tp) -> str:
    """A type as a user writes its values: `int`, `fork or exec`, `list of int`, `section`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return "section"
    if origin is typing.Literal:
        return " or ".join(str(a) for a in args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " or ".join(str(m.value) for m in tp)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else type_text(a) for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is dict:
        return f"mapping of {type_text(args[0])} to {type_text(args[1])}"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def default_text(f: dataclasses.Field) -> str:
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "(required)"
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return yaml_text(value)


def yaml_text(value: Any) -> str:
    """A value as YAML on one line (`null`, `true`, `[0.9, 0.999]`, `127.0.0.1`)."""
    def plain(v):
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, dict):
            return {plain(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v
    text = yaml.safe_dump(plain(value), default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comments that document it in the class's source: the block of comment
    lines right above the field and any comment on the field's own lines, in source order."""
    source_file = inspect.getsourcefile(cls)
    comments, lines, tree = _parsed(source_file)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__), None)
    if node is None:
        raise LookupError(f"{cls.__name__} not found in {source_file}")
    found = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above = []
        line = stmt.lineno - 1
        while line > node.lineno and lines[line - 1].lstrip().startswith("#"):
            above.append(comments[line])
            line -= 1
        own = [comments[n] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
        text = " ".join([*reversed(above), *own])
        if text:
            found[stmt.target.id] = text
    return found


@lru_cache(maxsize=None)
def _parsed(path: str) -> tuple[dict[int, str], list[str], ast.Module]:
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    return comments, source.splitlines(), ast.parse(source)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "|*<>[]"})


def _escape(text: str) -> str:
    """Comment text for a table cell: Markdown's special characters escaped outside `code`."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.translate(_MARKDOWN_SPECIAL) for i, p in enumerate(parts))


def key_html(key: str) -> str:
    """A key as inline HTML code that a narrow column may break after a dot, never
    inside a name (run.<wbr>start_method, not run.start_m ethod)."""
    return f'<code class="{KEY_CLASS}">' + html.escape(key).replace(".", ".<wbr>") + "</code>"


def render_markdown(sections: Optional[list[Section]] = None) -> str:
    """The reference as Markdown: one table per section."""
    blocks = []
    for section in sections if sections is not None else config_sections():
        if not section.keys:
            continue
        blocks.append(f"## `{section.path}`")
        if section.intro:
            blocks.append(_escape(section.intro))
        rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
        rows += [f"| {key_html(k.key)} | {_escape(k.type)} | `{k.default}` "
                 f"| {_escape(k.comment)} |" for k in section.keys]
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) + "\n"
