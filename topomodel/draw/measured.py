"""Measured against modelled: an nccl-tests log's busbw beside the model's, by size."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topomodel.draw.io import DPI
from topomodel.draw.text import fit_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from topomodel.analysis.collectives.measured import NcclCheck


def _size_label(size: int) -> str:
    for unit, factor in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size >= factor:
            value = size / factor
            return f"{value:.3g}{unit}"
    return f"{size}"


def nccl_check_figure(check: NcclCheck, *, title: str) -> Figure:
    """busbw (GB/s) against size (bytes, log scale): the measured out-of-place and
    in-place columns, the model, and the sizes flagged as below it."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullLocator

    sizes = [s.size_bytes for s in check.sizes]
    fig = Figure(figsize=(7.5, 4.4), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(sizes, [s.model_busbw_Bps / 1e9 for s in check.sizes], "-", color="#4e79a7",
            lw=2, label="model")
    ax.plot(sizes, [s.out_of_place_busbw_Bps / 1e9 for s in check.sizes], "o", ms=4,
            color="#f28e2b", label="measured, out-of-place")
    in_place = [(s.size_bytes, s.in_place_busbw_Bps / 1e9) for s in check.sizes
                if s.in_place_busbw_Bps is not None]
    if in_place:
        ax.plot(*zip(*in_place, strict=True), "x", ms=4, color="#59a14f",
                label="measured, in-place")
    flagged = check.flagged
    if flagged:
        ax.plot([s.size_bytes for s in flagged], [s.measured_busbw_Bps / 1e9 for s in flagged],
                "o", ms=10, mfc="none", mec="#e15759", mew=1.5,
                label=f"more than {check.threshold:.0%} below the model")
    ax.set_xscale("log", base=2)
    ticks = sizes if len(sizes) <= 12 else sizes[:: max(1, len(sizes) // 10)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([_size_label(t) for t in ticks], fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"size (bytes, log scale; {check.collective}, nccl-tests convention)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    heading, size = fit_text(title, fig.get_figwidth() - 1.2, 11.0)
    ax.set_title(heading, fontsize=size, loc="left")
    return fig
