"""The review as a document: sections of text, tables, figures, cards and callouts,
which the renderer turns into HTML, Markdown and JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topomodel.inputs.units import format_size
from topomodel.report.output import Table


def size_text(size_bytes: float) -> str:
    """A message size as people set it: binary prefixes for whole KiB/MiB/GiB, else
    decimal.

    Examples
    --------
    >>> size_text(64 * 2**20), size_text(2**30), size_text(40e6)
    ('64 MiB', '1 GiB', '40 MB')
    """
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if size_bytes >= factor and float(size_bytes / factor).is_integer():
            return f"{size_bytes / factor:g} {unit}"
    return format_size(size_bytes)


@dataclass(frozen=True)
class Text:
    """A paragraph (plain text; the renderers escape it)."""

    text: str


@dataclass(frozen=True)
class TableBlock:
    """A table with an optional caption under it."""

    table: Table
    caption: str = ""


@dataclass(frozen=True)
class FigureBlock:
    """A figure of :attr:`Review.figures`, by name."""

    name: str


@dataclass(frozen=True)
class Cards:
    """Headline numbers: (label, value, detail) triples."""

    items: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Callout:
    """A highlighted list: ``warning`` or ``note``."""

    level: str
    items: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    """A titled part of the report; ``id`` is its anchor."""

    id: str
    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class ReviewFigure:
    """An image of the report: PNG bytes, and where report.md links it."""

    name: str
    caption: str
    png: bytes

    @property
    def file(self) -> str:
        """Path relative to the report directory."""
        return f"figures/{self.name}.png"


@dataclass(frozen=True)
class Review:
    """A collected design review, ready to render."""

    title: str
    subtitle: str
    sections: tuple[Section, ...]
    figures: dict[str, ReviewFigure]
    data: dict[str, Any]  # report.json, without schema, version and warnings
    warnings: tuple[str, ...]
    headline: tuple[dict[str, str], ...]  # item / value rows the CLI prints
    tables: tuple[Table, ...] = ()  # every table with its machine records (csv, parquet)


Block = Text | TableBlock | FigureBlock | Cards | Callout
