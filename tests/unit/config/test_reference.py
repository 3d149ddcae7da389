"""The configuration reference lists every key the loader accepts, with its default and comment."""
import dataclasses
import importlib.util
import sys
import typing

import pytest

from psgd.config import Config, config_to_dict, load_config
from psgd.config.reference import config_sections, field_comments, key_html, render_markdown, yaml_text


def accepted_keys(cls=Config, prefix="") -> set[str]:
    """Every key path the loader accepts, from the dataclasses (internal fields are not keys)."""
    keys = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = prefix + f.name.removesuffix("_")
        tp = hints[f.name]
        inner = [a for a in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(a)]
        if inner:
            suffix = {list: "[]", dict: ".<name>"}.get(typing.get_origin(tp), "")
            keys |= accepted_keys(inner[0], key + suffix + ".")
        if not inner or f.default_factory is not inner[0]:
            keys.add(key)
    return keys


def test_every_key_is_listed_once_with_a_comment():
    listed = [k for s in config_sections() for k in s.keys]
    assert sorted(k.key for k in listed) == sorted(accepted_keys())
    assert [k.key for k in listed if not k.comment] == [], "document every config key with a comment"
    page = render_markdown()
    for k in listed:
        assert f"| {key_html(k.key)} |" in page


def lookup(tree: dict, key: str):
    for part in key.split("."):
        tree = tree[part]
    return tree


def test_defaults_are_the_ones_a_default_config_holds():
    defaults = config_to_dict(load_config({}))
    checked = 0
    for section in config_sections():
        for k in section.keys:
            if "[]" in k.key or "<name>" in k.key or k.key.startswith(("optimizer.dc_asgd.", "train.target.",
                                                                            "workers.delay.", "wire.compression.",
                                                                            "cluster.workers.", "consistency.quorum.")):
                continue  # inside a section that is absent (null or empty) by default
            assert k.default == yaml_text(lookup(defaults, k.key)), k.key
            checked += 1
    assert checked > 100


def test_a_key_inside_an_optional_section_is_a_valid_key():
    # train.target.value has no default the loader fills in, but it is a key the loader accepts.
    cfg = load_config({}, ["train.target.value=0.9", "optimizer.dc_asgd.lambda=0.1",
                           "workers.transient=[{rank: 1, factor: 2.0}]"])
    assert cfg.train.target.value == 0.9 and cfg.optimizer.dc_asgd.lambda_ == 0.1
    assert cfg.workers.transient[0].factor == 2.0


SOURCE = '''
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """What the sample holds."""
    # Above, first line;
    # above, second line.
    documented: int = 1  # trailing
    plain: str = "x # not a comment"

    # separated by a blank line from nothing
    below_blank: float = 2.0
    spans: list = (  # opening line
        None)        # closing line
'''


@pytest.fixture
def sample(tmp_path, monkeypatch):
    path = tmp_path / "reference_sample.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("reference_sample", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "reference_sample", module)
    spec.loader.exec_module(module)
    return module.Sample


def test_comments_above_and_beside_a_field_are_its_documentation(sample):
    assert field_comments(sample) == {
        "documented": "Above, first line; above, second line. trailing",
        "below_blank": "separated by a blank line from nothing",
        "spans": "opening line closing line",
    }


def test_the_page_escapes_markdown_outside_code():
    from psgd.config.reference import KeyDoc, Section
    page = render_markdown([Section("s", "", (KeyDoc("s.k", "a or b", "1", "x | y, 2**k, `a|b`"),))])
    assert '| <code class="config-key">s.<wbr>k</code> | a or b | `1` | x \\| y, 2\\*\\*k, `a|b` |' in page
