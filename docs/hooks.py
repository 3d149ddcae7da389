"""MkDocs hooks: the reference pages are generated from the code at build time, and the
committed reports, configs and examples are published so the pages can link and show them."""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = ("benchmarks", "configs", "examples")  # repository folders the pages link into
CHANGELOG = "CHANGELOG.md"


def _config_reference() -> str:
    from psgd.config.reference import render_markdown
    return render_markdown()


def _cli_reference() -> str:
    from psgd.cli.reference import render_markdown
    return render_markdown()


def _changelog() -> str:
    return (REPO / CHANGELOG).read_text(encoding="utf-8")


# A page's marker line -> what replaces it.
GENERATED = {
    "<!-- generated: config reference -->": _config_reference,
    "<!-- generated: cli reference -->": _cli_reference,
    "<!-- generated: changelog -->": _changelog,
}


def on_files(files, config):
    for folder in PUBLISHED:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files.append(File(path.relative_to(REPO).as_posix(), str(REPO), config["site_dir"],
                                  config["use_directory_urls"]))
    return files


# A Markdown link or image: (bang, text, target).
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def _uncommitted_targets_as_text(markdown: str, page_path: Path) -> str:
    """A committed report may link files its study kept out of the repository (each cell's plots
    of the simulated study): say so in the text instead of publishing a dead link."""
    def replace(match: re.Match) -> str:
        bang, text, target = match.groups()
        local = target.split("#", 1)[0]
        if not local or "://" in local or local.startswith("mailto:") or (page_path.parent / local).exists():
            return match.group(0)
        return f"*({'plot' if bang else 'file'} `{local}` is not committed with this report)*"
    return LINK.sub(replace, markdown)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri.startswith(tuple(f"{folder}/" for folder in PUBLISHED)):
        markdown = _uncommitted_targets_as_text(markdown, REPO / page.file.src_uri)
    for marker, make in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
