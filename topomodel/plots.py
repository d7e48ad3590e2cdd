"""Plots (matplotlib, imported only when a plot is drawn)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def plot_scaling(points: Sequence[Any], path: str, *, title: str) -> None:
    """Tokens/s and MFU against accelerator count; PNG or SVG by the file's suffix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [p.accelerators for p in points]
    fig, left = plt.subplots(figsize=(7, 4), dpi=120, layout="constrained")
    left.plot(counts, [p.result.tokens_per_s / 1e6 for p in points], "o-", color="tab:blue",
              label="throughput")
    left.set_xscale("log", base=2)
    left.set_xlabel("accelerators")
    left.set_ylabel("throughput (million tokens/s)", color="tab:blue")
    right = left.twinx()
    right.plot(counts, [100 * p.result.mfu for p in points], "s--", color="tab:red",
               label="MFU")
    right.plot(counts, [100 * p.efficiency for p in points], "^:", color="tab:green",
               label="scaling efficiency")
    right.set_ylabel("MFU, scaling efficiency (%)")
    right.set_ylim(0, 105)
    lines_left, labels_left = left.get_legend_handles_labels()
    lines_right, labels_right = right.get_legend_handles_labels()
    left.legend(lines_left + lines_right, labels_left + labels_right, loc="lower left")
    left.set_title(title)
    fig.savefig(path)
    plt.close(fig)
