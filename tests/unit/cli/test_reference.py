"""The command-line reference shows every command and every option the parser has."""
import argparse

from psgd.cli import build_parser
from psgd.cli.reference import commands, render_markdown


def parsers(parser, words=()):
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*words, name))


def test_every_command_and_option_is_in_the_reference():
    page = render_markdown()
    expected = list(parsers(build_parser()))
    assert [w for w, _, _ in commands()] == [w for w, _ in expected]
    assert ("tune", "staleness") in dict(expected) and ("sim", "calibrate") in dict(expected)
    for words, parser in expected:
        heading = f"## `{' '.join(('psgd', *words))}`"
        assert heading in page
        section = page.split(heading, 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                assert not any(s in section for s in action.option_strings if s.startswith("--"))
                continue
            for flag in action.option_strings:
                assert flag in section, (words, flag)
