"""Text on figures: its size in inches, and fitting it to a width (shrink, then wrap)."""

from __future__ import annotations

import textwrap
from functools import lru_cache
from typing import TYPE_CHECKING

from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path

if TYPE_CHECKING:
    pass



@lru_cache(maxsize=4096)
def text_in(text: str, size: float, bold: bool = False) -> tuple[float, float]:
    """Width and height of ``text`` at ``size`` points, inches (multi-line aware)."""
    lines = text.split("\n")
    prop = FontProperties(size=size, weight="bold" if bold else "normal")
    width = max(text_to_path.get_text_width_height_descent(line, prop, ismath=False)[0]
                for line in lines)
    return width / 72, len(lines) * size * 1.25 / 72


def fit_text(text: str, width_in: float, size: float, *, bold: bool = False,
         smallest: float = 9.0) -> tuple[str, float]:
    """``text`` and a font size (down to ``smallest``) that fit ``width_in`` inches on
    one line; shortened with an ellipsis when even the smallest size is too wide."""
    while size > smallest and text_in(text, size, bold)[0] > width_in:
        size -= 0.5
    while len(text) > 8 and text_in(text, size, bold)[0] > width_in:
        text = text[:int(len(text) * 0.9) - 1].rstrip() + "…"
    return text, size


def wrap_text(text: str, width: int, lines: int = 2) -> list[str]:
    """``text`` in at most ``lines`` lines of ``width`` characters (the last shortened)."""
    out = textwrap.wrap(text, max(width, 30))
    if len(out) > lines:
        rest = " ".join(out[lines - 1:])
        out[lines - 1:] = [textwrap.shorten(rest, max(width, 30), placeholder=" …")]
    return out
