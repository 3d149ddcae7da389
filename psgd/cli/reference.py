"""The command-line reference: every `psgd` command's help, as the parser itself prints it.
The docs render it at build time (docs/hooks.py), so it cannot drift from the parser."""
from __future__ import annotations

import argparse
from typing import Iterator, Optional

__all__ = ["commands", "render_markdown"]

WIDTH = 100  # help text wrapped as on a 100-column terminal, whatever the build's terminal is


def commands(parser: Optional[argparse.ArgumentParser] = None,
             path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """(command words, one-line help, parser) for the top level and every sub-command, depth first."""
    if parser is None:
        from psgd.cli import build_parser
        parser = build_parser()
        yield path, parser.description or "", parser
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            yield (*path, name), helps.get(name, ""), sub
            yield from commands(sub, (*path, name))


def _help(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    return parser.format_help().rstrip()


def render_markdown() -> str:
    blocks = []
    for words, summary, parser in commands():
        blocks.append(f"## `{' '.join(('psgd', *words))}`")
        if summary:
            blocks.append(summary)
        blocks.append(f"```text\n{_help(parser)}\n```")
    return "\n\n".join(blocks) + "\n"
