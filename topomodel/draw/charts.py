"""Charts: per-tier utilization, the step's time split, scaling curves and the
Pareto front of a sweep."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import NullLocator

from topomodel.draw.io import DPI, save_figure
from topomodel.draw.text import fit_text, text_in
from topomodel.inputs.units import format_si
from topomodel.vocabulary import LINK_TIER_LABELS

if TYPE_CHECKING:
    from topomodel.analysis.pareto import Objective
    from topomodel.analysis.training.step import StepResult

STEP_COLOURS = {"compute": "#4e79a7", "hot-expert imbalance": "#76b7b2",
                "pipeline bubble": "#bab0ac",
                "exposed communication": "#f28e2b", "synchronisation wait": "#e15759",
                "bandwidth wall": "#ffbe7d", "latency wall": "#86bcb6",
                "topology wall": "#d37295", "sync wall": "#b07aa1"}


def tier_utilization_figure(tiers: Sequence[Mapping[str, Any]], *,
                            title: str | None = None) -> Figure:
    """Peak and mean link utilization (%) per link tier, with each tier's capacity.

    ``tiers`` is the ``tiers`` list of a route report's data: mappings with ``name``,
    ``peak_utilization`` and ``mean_utilization`` (0-1 fractions), ``capacity_Bps``
    (all links, one direction), ``bytes`` and ``time_share`` (0-1).
    """
    names = [str(t["name"]) for t in tiers]
    peak = np.array([100 * float(t["peak_utilization"]) for t in tiers])
    mean = np.array([100 * float(t["mean_utilization"]) for t in tiers])
    fig = Figure(figsize=(max(6.5, 1.45 * len(tiers) + 2.6), 4.6), dpi=DPI,
                 layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(tiers))
    width = 0.38
    bars_peak = ax.bar(x - width / 2, peak, width, label="busiest link", color="#e15759")
    bars_mean = ax.bar(x + width / 2, mean, width, label="mean over links", color="#4e79a7")
    for bars in (bars_peak, bars_mean):
        ax.bar_label(bars, fmt="%.0f%%", fontsize=7, padding=2)
    ax.axhline(100, color="#777777", lw=0.8, ls="--")
    labels = [f"{LINK_TIER_LABELS.get(n, n)}\n"
              f"{format_si(float(t['capacity_Bps']) * 8, 'b/s')} per dir.\n"
              f"limits {float(t.get('time_share', 0.0)):.0%} of time"
              for n, t in zip(names, tiers, strict=True)]
    ax.set_xticks(x, labels, fontsize=8)
    top = max(110.0, float(peak.max()) * 1.15 if len(peak) else 110.0)
    ax.set_ylim(0, top)
    ax.set_ylabel("utilization (%): busy time / collective time")
    ax.set_xlabel("link tier, its capacity (all links, one direction)\nand the share of"
                  " the bandwidth time whose slowest link it holds", fontsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    heading, size = fit_text(title or "Link utilization per tier", fig.get_figwidth() - 1.2, 11.0)
    ax.set_title(heading, fontsize=size, loc="left")
    return fig


def step_figure(result: StepResult, *, title: str | None = None) -> Figure:
    """One training step as stacked bars: compute, hot-expert imbalance, pipeline
    bubble, exposed communication and wait; under it, exposed communication and wait split into the
    bandwidth, latency, topology and synchronisation walls. Times in ms (or s)."""
    total = result.step_time_s
    scale, unit = (1e3, "ms") if total < 10 else (1.0, "s")
    before_comm = result.compute_s + result.imbalance_s + result.bubble_s
    parts = [("compute", result.compute_s), ("hot-expert imbalance", result.imbalance_s),
             ("pipeline bubble", result.bubble_s),
             ("exposed communication", result.exposed_comm_s),
             ("synchronisation wait", result.wait_s)]
    walls = [("bandwidth wall", result.walls.get("bandwidth_s", 0.0)),
             ("latency wall", result.walls.get("latency_s", 0.0)),
             ("topology wall", result.walls.get("topology_s", 0.0)),
             ("sync wall", result.walls.get("sync_s", 0.0))]
    fig = Figure(figsize=(10, 4.2), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    span = max(total, before_comm + sum(v for _, v in walls))
    width_in = (10 - 2.0) / 1.15  # the bars' share of the page, roughly, for value labels

    def amount(value_s: float) -> str:
        value = value_s * scale
        if abs(value) >= 1e9:  # a number of a dozen digits or hundreds: short
            return f"{value:.4g} {unit}"
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
        return f"{value:,.{digits}f} {unit}"

    for y, segments, start in ((1.0, parts, 0.0),
                               (0.0, walls, before_comm)):
        left = start
        for name, value in segments:
            ax.barh(y, value * scale, left=left * scale, height=0.55,
                    color=STEP_COLOURS[name], edgecolor="white", lw=0.8)
            text = amount(value)
            if value > 0 and text_in(text, 7.5)[0] + 0.1 < value / span * width_in:
                ax.text((left + value / 2) * scale, y, text, ha="center", va="center",
                        fontsize=7.5, color="black")
            left += value
        ax.text(left * scale + span * scale * 0.01, y, f"{amount(left - start)}"
                + (" step" if y else " in all"), ha="left", va="center", fontsize=8,
                fontweight="bold")
    ax.set_yticks([1.0, 0.0], ["step", "exposed comm.\n+ wait by wall"], fontsize=9)
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlim(0, span * scale * 1.15)
    ax.set_xlabel(f"time per step ({unit})")
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=STEP_COLOURS[name], label=name) for name, _ in parts + walls]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8,
               frameon=False)
    lay = result.layout
    shape = f"TP {lay.tp} × PP {lay.pp} × DP {lay.dp} × CP {lay.cp}" + (
        f", EP {lay.ep}" if lay.ep > 1 else "")
    heading, size = fit_text(title or f"{result.model}: step {format_si(total, 's')}, MFU"
                         f" {result.mfu:.1%}", fig.get_figwidth() - 0.4, 11.0)
    fig.suptitle(heading, fontsize=size, x=0.01, ha="left")
    ax.set_title(f"{shape} on {lay.world:,} accelerators; exposed communication + wait ="
                 f" {result.comm_share:.1%} of the step", fontsize=8.5, loc="left",
                 color="#333333")
    return fig


def scaling_figure(points: Sequence[Any], *, title: str) -> Figure:
    """Throughput (million tokens/s), MFU and scaling efficiency (%) against accelerator
    count; ``points`` are :class:`~topomodel.analysis.training.studies.ScalePoint` objects."""
    counts = [p.accelerators for p in points]
    fig = Figure(figsize=(7.5, 4.3), dpi=DPI, layout="constrained")
    left = fig.add_subplot()
    left.plot(counts, [p.result.tokens_per_s / 1e6 for p in points], "o-", color="tab:blue",
              label="throughput")
    left.set_xscale("log", base=2)
    left.set_xticks(counts, [f"{c:,}" for c in counts], fontsize=8)
    left.xaxis.set_minor_locator(NullLocator())
    left.set_xlabel("accelerators (log scale)")
    left.set_ylabel("throughput (million tokens/s)", color="tab:blue")
    right = left.twinx()
    right.plot(counts, [100 * p.result.mfu for p in points], "s--", color="tab:red",
               label="MFU")
    right.plot(counts, [100 * p.efficiency for p in points], "^:", color="tab:green",
               label="scaling efficiency")
    right.set_ylabel("MFU, scaling efficiency (%)")
    right.set_ylim(0, 105)
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8,
               frameon=False)
    heading, size = fit_text(title, fig.get_figwidth() - 1.6, 11.0)
    left.set_title(heading, fontsize=size, loc="left")
    return fig


def pareto_figure(x: np.ndarray, y: np.ndarray, front: np.ndarray, *,
                  objectives: tuple[Objective, Objective], title: str,
                  excluded: tuple[np.ndarray, np.ndarray] | None = None) -> Figure:
    """Every point and the Pareto front of two objectives.

    ``front`` is a boolean mask over ``x`` and ``y``; ``excluded`` are points that
    break a constraint, drawn faintly for context. Axes named like ``power_W`` or
    ``step_time_s`` get SI-prefixed units (:data:`~topomodel.analysis.pareto.AXIS_UNITS`).
    """
    from matplotlib.ticker import EngFormatter

    from topomodel.analysis.pareto import AXIS_UNITS

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    if excluded is not None and len(excluded[0]):
        ax.scatter(excluded[0], excluded[1], s=12, marker="x", color="0.8",
                   label="breaks a constraint")
    ax.scatter(x[~front], y[~front], s=14, color="0.55", label="dominated")
    order = np.argsort(x[front], kind="stable")
    fx, fy = x[front][order], y[front][order]
    ax.plot(fx, fy, "-", color="tab:red", linewidth=1.2, zorder=2)
    ax.scatter(fx, fy, s=30, color="tab:red", zorder=3, label="Pareto-optimal")
    for axis, objective in ((ax.xaxis, objectives[0]), (ax.yaxis, objectives[1])):
        axis.set_label_text(str(objective))
        unit = next((u for suffix, u in AXIS_UNITS if objective.name.endswith(suffix)), None)
        if unit is not None:
            axis.set_major_formatter(EngFormatter(unit=unit))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return fig


def plot_front(x: np.ndarray, y: np.ndarray, front: np.ndarray, path: str, *,
               objectives: tuple[Objective, Objective], title: str,
               excluded: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Draw :func:`pareto_figure` to ``path`` (PNG, SVG or PDF by its suffix)."""
    save_figure(pareto_figure(x, y, front, objectives=objectives, title=title,
                              excluded=excluded), path)
