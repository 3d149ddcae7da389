"""The configuration reference as the docs site renders it: every key is one
code element that may break only after a dot, and the site's stylesheet keeps
the theme from breaking it anywhere else ("run.start_m ethod")."""
import re
from html.parser import HTMLParser

import markdown
import yaml
from conftest import ROOT

from psgd.config.reference import KEY_CLASS, config_sections, render_markdown


class _Keys(HTMLParser):
    """The content of every <code class=KEY_CLASS>, its <wbr> kept as a marker."""

    def __init__(self):
        super().__init__()
        self.keys: list[str] = []
        self._inside = False

    def handle_starttag(self, tag, attrs):
        if tag == "code" and (KEY_CLASS in (dict(attrs).get("class") or "").split()):
            self._inside = True
            self.keys.append("")
        elif tag == "wbr" and self._inside:
            self.keys[-1] += "|"

    def handle_endtag(self, tag):
        if tag == "code":
            self._inside = False

    def handle_data(self, data):
        if self._inside:
            self.keys[-1] += data


def test_every_key_renders_whole_with_breaks_only_after_its_dots():
    page = markdown.markdown(render_markdown(), extensions=["tables"])  # what mkdocs renders the page with
    parser = _Keys()
    parser.feed(page)
    want = [k.key for s in config_sections() for k in s.keys]
    assert [k.replace("|", "") for k in parser.keys] == want
    for rendered in parser.keys:
        # Every break opportunity follows a dot, and every dot is followed by one.
        assert re.sub(r"\.\|", ".", rendered).count("|") == 0 and rendered.count(".") == rendered.count(".|"), rendered


def test_the_site_stylesheet_forbids_breaking_inside_a_key():
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    [css_path] = site["extra_css"]
    css = (ROOT / "docs" / css_path).read_text()
    rule = re.search(r"\.md-typeset code\." + KEY_CLASS + r"\s*\{([^}]*)\}", css)
    assert rule is not None
    props = dict(p.split(":") for p in (x.strip() for x in rule.group(1).split(";")) if p)
    assert {k.strip(): v.strip() for k, v in props.items()} == {"word-break": "normal", "overflow-wrap": "normal",
                                                                "hyphens": "none"}
