"""The command-line reference (``docs/cli.md``): every verb's ``--help``, from the parser.

``python -m topomodel.cli.reference > docs/cli.md`` writes it; a test holds the file to
the parser, so no option goes undocumented and no documented option goes stale.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

HELP_WIDTH = 92
"""Columns of the help text in the reference (not the terminal's, which varies)."""


def cli_reference() -> str:
    """Markdown: the top-level help, then each verb's (and each sub-verb's) in order."""
    from topomodel.cli.parser import build_parser

    parts = ["# Command-line reference\n\n"
             "Every verb's `--help`, generated from the parser by `python -m"
             " topomodel.cli.reference > docs/cli.md` (a test checks it is current).\n"]
    for parser in _parsers(build_parser()):
        parser.formatter_class = _fixed_width(parser.formatter_class)
        parts.append(f"\n## `{parser.prog}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
    return "".join(parts)


def _fixed_width(formatter: Any) -> Any:
    """``formatter`` (a help-formatter class) at :data:`HELP_WIDTH` columns."""
    return lambda prog: formatter(prog, width=HELP_WIDTH)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every parser below it, depth first, in the order they were added."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases once
                yield from _parsers(child)


if __name__ == "__main__":
    print(cli_reference(), end="")
