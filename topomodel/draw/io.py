"""Figures to files and bytes: PNG, SVG or PDF by the file's suffix, written atomically.

Every figure of the tool (topology, tiers, scaling curves, the Pareto front) goes out
through :func:`save_figure`, so every ``--plot`` and ``-o`` takes the same formats.
matplotlib is imported only when a figure is encoded.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from topomodel.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURE_FORMATS = ("png", "svg", "pdf")
_SVG_LOCK = threading.Lock()
DPI = 150
"""Pixels per inch of PNG output: sharp on a laptop screen and a projector, and a
14-inch-wide diagram stays near 2,000 pixels."""


def figure_format(path: str | Path) -> str:
    """``png``, ``svg`` or ``pdf`` from the file's suffix.

    Raises
    ------
    UsageError
        For any other suffix.

    Examples
    --------
    >>> figure_format("out/topology.SVG")
    'svg'
    >>> figure_format("front.jpg")
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: front.jpg: a figure file ends in .png, .svg or .pdf
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FIGURE_FORMATS:
        raise UsageError(f"{path}: a figure file ends in .png, .svg or .pdf")
    return suffix


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    """``fig`` encoded as PNG (at :data:`DPI`), SVG (text drawn as paths, so it needs no
    fonts; no date and fixed ids, so the same figure gives the same bytes) or PDF (no
    creation date), on the figure's Agg canvas if it has one (as
    :func:`~topomodel.draw.topology.drawn_texts` leaves it), else a new one; the figure
    is cleared afterwards.

    Raises
    ------
    UsageError
        For a format not in :data:`FIGURE_FORMATS`.
    """
    if fmt not in FIGURE_FORMATS:
        raise UsageError(f"unknown image format {fmt!r}; choose {', '.join(FIGURE_FORMATS)}")
    import matplotlib as mpl
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buffer = io.BytesIO()
    if not isinstance(fig.canvas, FigureCanvasAgg):  # no pyplot, no global backend
        FigureCanvasAgg(fig)  # (one kept from a layout check reuses its text sizes)
    if fmt == "svg":
        # the SVG writer reads its id salt and font mode from the global rcParams: set
        # them under a lock so threads do not see each other's settings
        with _SVG_LOCK, mpl.rc_context({"svg.hashsalt": "topomodel", "svg.fonttype": "path"}):
            fig.savefig(buffer, format="svg", metadata={"Date": None})
    elif fmt == "pdf":
        fig.savefig(buffer, format="pdf", metadata={"CreationDate": None})
    else:
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    fig.clear()
    return buffer.getvalue()


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as PNG, SVG or PDF by its suffix, atomically (a
    temporary file moved into place); the figure is cleared afterwards. Returns the path.

    Raises
    ------
    UsageError
        For a suffix other than ``.png``, ``.svg`` or ``.pdf``.
    OSError
        When the file cannot be written (nothing is left behind).
    """
    from topomodel.files import atomic_bytes

    target = Path(path)
    return atomic_bytes(target, figure_bytes(fig, figure_format(target)))
