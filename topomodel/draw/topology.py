"""Diagrams: the tiered topology, per-tier utilization, the step breakdown, scaling curves.

Every function returns a :class:`matplotlib.figure.Figure` made with matplotlib's object
API (no pyplot state, no backend switching), so figures can be drawn in threads or
worker processes; :func:`save_figure` writes PNG, SVG or PDF by the file's suffix,
atomically, and :func:`figure_bytes` returns the encoded image for embedding in HTML.
This module imports matplotlib; ``import topomodel`` does not import this module.

The topology diagram stacks the node tiers bottom to top: accelerators, scale-up switch
levels, NICs, leaf, spine, core. Small fabrics are drawn node by node (``full``); large
ones (``aggregate``) draw one box per tier and *column*, a column being whole scale-up
domains (one domain, scalable unit or pod, or a run of them), and label each link bundle
``cables × rate per direction``. :func:`topology_layout` computes either layout as plain
numbers, for tests and reports that want the bundles without a picture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch
from matplotlib.text import Text

from topomodel.fabric.scaleout import scaleout_kind
from topomodel.fabric.scaleup import scaleup_kind
from topomodel.fabric.tables import Fabric
from topomodel.inputs.units import format_si

if TYPE_CHECKING:
    from matplotlib.axes import Axes

from topomodel.draw.io import DPI
from topomodel.draw.layout import (
    BOX_WIDTH,
    DRAWING_ROWS,
    Box,
    Bundle,
    TopologyLayout,
    topology_layout,
)
from topomodel.draw.palette import (
    KIND_COLOURS,
    MEDIUM_COLOURS,
    MEDIUM_LABELS,
    MEDIUM_SHORT,
    UTILIZATION_CMAP,
)
from topomodel.draw.text import fit_text, text_in, wrap_text
from topomodel.draw.torus import draws_torus, torus_figure
from topomodel.vocabulary import LINK_TIER_LABELS, TIER_KIND

ROW_LABELS = {"accelerator": "accelerators", "scaleup": "scale-up switches",
              "scaleup_l2": "scale-up L2\nswitches", "scaleup_l3": "scale-up L3\nswitches",
              "nic": "NICs", "leaf": "leaf switches", "spine": "spine switches",
              "core": "core switches"}


COLUMN_IN = 1.6  # aggregated view: least width of one column, inches


SLOT_IN = 0.75  # full view: least width per node of the widest row, inches


ROW_IN = 1.15  # height of one tier row, inches


LEFT_IN = 1.5  # row labels


RIGHT_IN = 1.9  # colour bar or medium legend


TOP_IN = 1.15  # title and a subtitle of up to two lines


BOTTOM_IN = 0.75  # footnote of up to two lines


EXTRA_BOTTOM = 0.4  # rows of room under the bottom row for labels of links inside a box


MIN_WIDTH_IN = 8.0


COMFORT_WIDTH_IN = 17.0  # wider than this, box labels wrap before the page grows


MAX_WIDTH_IN = 32.0


BOX_HEIGHT = 0.44  # box height, in rows


ROTATED_BOX_HEIGHT = 0.72  # full view: boxes whose labels are turned upright


LANE_OFFSET = 0.27  # a bundle that passes a row runs this far right of the column centre


NARROW_RIGHT = 0.13  # right edge of a box that leaves room for such a lane, from centre


LOOP_BULGE = 0.14  # links inside one box: how far the loop reaches out, in columns


LABEL_PAD_IN = 0.18  # horizontal clearance kept around a label, inches


TITLE_SIZE = 12.0


FONT_SIZE = 8.0


SMALL_FONT_SIZE = 7.0


LAYOUT_ATTEMPTS = 3  # redraw on a larger page at most this often to separate labels


GROWTH = 1.25  # page growth per attempt


def topology_figure(fabric: Fabric, *, link_utilization: np.ndarray | None = None,
                    detail: str = "auto", title: str | None = None) -> Figure:
    """The tiered topology, link load as colour (utilization in %) when given.

    Parameters
    ----------
    fabric
        The built fabric.
    link_utilization
        Per row of ``fabric.links``: busy time / collective time (0-1, above 1 when
        overcommitted), e.g. ``run.timing.link_busy_s / run.time_s`` for a
        :class:`~topomodel.analysis.collectives.collective.CollectiveRun`. The full view
        colours each link by its busier direction; the aggregated view colours each
        bundle by its busiest link and labels the peak and the mean.
    detail
        ``auto``, ``full`` or ``aggregate`` (see :func:`topology_layout`); ``auto`` draws
        a torus with no scale-out as its grid (:func:`~topomodel.draw.torus.torus_figure`).
    title
        Figure title (default: the design's name).

    Raises
    ------
    UsageError
        For an unknown ``detail`` or ``full`` on a large fabric.
    """
    if draws_torus(fabric, detail):
        return torus_figure(fabric, link_utilization=link_utilization, title=title)
    layout = topology_layout(fabric, link_utilization=link_utilization, detail=detail)
    drawing = _Drawing(fabric, layout, loaded=link_utilization is not None,
                       title=title or f"{fabric.design.name or fabric.design.file}:"
                       " network topology")
    width_in, height_in = drawing.size()
    fig = drawing.figure(width_in, height_in)
    for _ in range(LAYOUT_ATTEMPTS):
        if not text_overlaps(fig) or width_in >= MAX_WIDTH_IN:
            break
        width_in = min(MAX_WIDTH_IN, width_in * GROWTH)
        height_in *= GROWTH ** 0.5
        fig = drawing.figure(width_in, height_in)
    return fig


def _rate_text(bundle: Bundle) -> str:
    if bundle.max_rate_Bps <= bundle.rate_Bps * (1 + 1e-9):
        return f"{bundle.cables:,} × {format_si(bundle.rate_Bps * 8, 'b/s')}"
    return f"{bundle.cables:,} cables, {format_si(bundle.capacity_Bps * 8, 'b/s')}"


def _bundle_text(bundle: Bundle, loaded: bool) -> str:
    lines = [_rate_text(bundle)]
    if bundle.lower == bundle.upper:
        lines[0] = f"inside: {lines[0]}"
    if bundle.medium == "mixed":
        lines.append(" + ".join(MEDIUM_SHORT.get(m, m) for m in bundle.media))
    if loaded:
        lines.append(f"peak {bundle.peak_utilization:.0%} · mean"
                     f" {bundle.mean_utilization:.0%}")
    if bundle.failed_cables:
        lines.append(f"{bundle.failed_cables:,} failed")
    return "\n".join(lines)


def _box_text(box: Box, row_tier: str) -> str:
    model = box.models[0] if len(box.models) == 1 else f"{len(box.models)} models"
    lines = [box.label] if box.label else []
    lines.append(f"{box.nodes:,} × {model}")
    if box.planes > 1 and row_tier != "accelerator":
        lines.append(f"{box.planes} planes")
    return "\n".join(lines)


def _fabric_summary(fabric: Fabric) -> str:
    """One line: accelerators, the scale-up and the scale-out."""
    s = fabric.structure
    up = scaleup_kind(s).caption(s.scaleup)
    down = scaleout_kind(s).caption(s.scaleout)
    return (f"{fabric.accelerator_count:,} accelerators · scale-up: {up} ·"
            f" scale-out: {down}")


@dataclass
class _Geometry:
    """Where one bundle's line and label go, in data coordinates."""

    path: np.ndarray  # (points, 2)
    label_xy: tuple[float, float]
    label_va: str


class _Drawing:
    """Places boxes, bundles and labels of a :class:`TopologyLayout` on a page."""

    def __init__(self, fabric: Fabric, layout: TopologyLayout, *, loaded: bool,
                 title: str) -> None:
        self.fabric = fabric
        self.layout = layout
        self.loaded = loaded
        self.title = title
        self.full = layout.detail == "full"
        present = sorted({b.row for b in layout.boxes})
        self.y_of_row = {r: float(i) for i, r in enumerate(present)}
        self.rows = present
        self.box_text = [_box_text(b, DRAWING_ROWS[b.row]) if not self.full else b.label
                         for b in layout.boxes]
        self.bundle_text = [_bundle_text(b, loaded) for b in layout.bundles]
        self.rotated: set[int] = set()
        self.label_every: dict[int, int] = {}
        self.geometry, self.narrow = self._geometry()
        loops = [g for b, g in zip(layout.bundles, self.geometry, strict=True)
                 if b.lower == b.upper or layout.boxes[b.lower].row == layout.boxes[b.upper].row]
        self.bottom = -0.5 - (EXTRA_BOTTOM if loops else 0.0)

    # geometry in data units: x in columns or slots, y in rows
    def _geometry(self) -> tuple[list[_Geometry], set[int]]:
        boxes = self.layout.boxes
        narrow: set[int] = set()
        out = []
        for bundle in self.layout.bundles:
            a, b = boxes[bundle.lower], boxes[bundle.upper]
            ya, yb = self.y_of_row[a.row], self.y_of_row[b.row]
            height_a, height_b = self._box_height(a), self._box_height(b)
            if bundle.lower == bundle.upper:  # a loop on the box's left side
                left = a.x - a.width / 2
                t = np.linspace(-np.pi / 2, np.pi / 2, 24)
                path = np.column_stack([left - LOOP_BULGE * np.cos(t),
                                        ya + 0.3 * height_a * np.sin(t)])
                out.append(_Geometry(path, (a.x, ya - height_a / 2 - 0.05), "top"))
                continue
            if a.row == b.row:  # same row: an arc below it
                t = np.linspace(0, 1, 24)
                dip = 0.2 + 0.05 * min(abs(b.x - a.x), 4.0)
                xs = a.x + (b.x - a.x) * t
                ys = ya - height_a / 2 - dip * np.sin(np.pi * t)
                out.append(_Geometry(np.column_stack([xs, ys]),
                                     (float(xs[12]), float(ys[12]) - 0.03), "top"))
                continue
            x_a, x_b = self._anchor(a, b), self._anchor(b, a)
            between = [i for i, box in enumerate(boxes)
                       if ya < self.y_of_row[box.row] < yb
                       and box.x - box.width / 2 < x_a < box.x + box.width / 2]
            lane = bool(between) and not self.full and x_a == x_b
            if lane:
                x_a = x_b = x_a + LANE_OFFSET
                narrow.update(i for i in between
                              if boxes[i].first_column == boxes[i].last_column)
            path = np.array([[x_a, ya + height_a / 2], [x_b, yb - height_b / 2]])
            if lane:  # label in the gap just under the upper box, clear of the rows passed
                label = (x_b, yb - 0.5)
            else:
                label = ((x_a + x_b) / 2, (ya + height_a / 2 + yb - height_b / 2) / 2)
            out.append(_Geometry(path, label, "center"))
        return out, narrow

    def _anchor(self, box: Box, other: Box) -> float:
        """Where a bundle meets ``box``: straight above/below a one-column partner."""
        if self.full:
            return box.x
        if other.first_column == other.last_column and (
                box.first_column <= other.first_column <= box.last_column):
            return float(other.first_column)
        if box.first_column == box.last_column:
            return box.x
        lo = max(box.first_column, other.first_column)
        hi = min(box.last_column, other.last_column)
        return (lo + hi) / 2 if lo <= hi else box.x

    def _box_height(self, box: Box) -> float:
        return ROTATED_BOX_HEIGHT if self.full and box.row in self.rotated else BOX_HEIGHT

    def size(self) -> tuple[float, float]:
        """Page size in inches that keeps every label clear of its neighbours."""
        layout = self.layout
        if self.full:
            per_slot = SLOT_IN
        else:
            per_slot = COLUMN_IN
            for i, box in enumerate(layout.boxes):
                width = box.width if box.first_column != box.last_column else (
                    BOX_WIDTH / 2 + NARROW_RIGHT if i in self.narrow else BOX_WIDTH)
                need = (text_in(self.box_text[i], FONT_SIZE)[0] + LABEL_PAD_IN) / width
                wide = LEFT_IN + RIGHT_IN + layout.slots * need > COMFORT_WIDTH_IN
                if wide and " × " in self.box_text[i]:  # put the model under the count
                    self.box_text[i] = self.box_text[i].replace(" × ", "\n× ", 1)
                    need = (text_in(self.box_text[i], FONT_SIZE)[0] + LABEL_PAD_IN) / width
                per_slot = max(per_slot, need)
            for text in self.bundle_text:
                per_slot = max(per_slot, text_in(text, SMALL_FONT_SIZE)[0] + LABEL_PAD_IN)
        width_in = LEFT_IN + RIGHT_IN + layout.slots * per_slot
        width_in = min(MAX_WIDTH_IN, max(MIN_WIDTH_IN, width_in))
        rows_high = len(self.rows) - self.bottom - 0.5
        return width_in, TOP_IN + BOTTOM_IN + rows_high * ROW_IN

    def figure(self, width_in: float, height_in: float) -> Figure:
        """Draw the page at this size."""
        layout = self.layout
        width_in, height_in = round(width_in * DPI) / DPI, round(height_in * DPI) / DPI
        fig = Figure(figsize=(width_in, height_in), dpi=DPI)  # whole pixels
        axes_w = width_in - LEFT_IN - RIGHT_IN
        axes_h = height_in - TOP_IN - BOTTOM_IN
        ax = fig.add_axes((LEFT_IN / width_in, BOTTOM_IN / height_in, axes_w / width_in,
                           axes_h / height_in))
        margin = 0.5 if not self.full else 0.0
        x_lo = -margin - (LOOP_BULGE if any(b.lower == b.upper for b in layout.bundles)
                          else 0.0)
        ax.set_xlim(x_lo, layout.slots - margin)
        ax.set_ylim(self.bottom, len(self.rows) - 0.5)
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
        ax.set_xticks([])
        ax.set_yticks([self.y_of_row[r] for r in self.rows],
                      [ROW_LABELS[DRAWING_ROWS[r]] for r in self.rows], fontsize=9)
        ax.tick_params(axis="y", length=0)
        in_per_x = axes_w / (layout.slots - margin - x_lo)
        if self.full:
            self._fit_node_labels(in_per_x)
            self.geometry, self.narrow = self._geometry()
        self._draw_bundles(fig, ax, width_in, height_in)
        self._draw_boxes(ax)
        title, size = fit_text(self.title, width_in - 0.8, TITLE_SIZE, bold=True)
        fig.text(0.5 / width_in, 1 - 0.3 / height_in, title, fontsize=size,
                 fontweight="bold", va="top")
        fig.text(0.5 / width_in, 1 - 0.6 / height_in, "\n".join(wrap_text(
                     self._subtitle(), int((width_in - 0.8) * 72 / (0.55 * 8.5)))),
                 fontsize=8.5, va="top", color="#333333", linespacing=1.3)
        fig.text(0.5 / width_in, 0.12 / height_in, "\n".join(wrap_text(
                     self._footnote(), int((width_in - 0.8) * 72 / (0.55 * SMALL_FONT_SIZE)))),
                 fontsize=SMALL_FONT_SIZE, va="bottom", color="#444444", linespacing=1.3)
        return fig

    def _subtitle(self) -> str:
        text = _fabric_summary(self.fabric)
        if not self.full:
            text += f" · columns: {self.layout.grouping}"
        return text

    def _footnote(self) -> str:
        if self.full:
            totals: dict[str, list[float]] = {}
            for b in self.layout.bundles:
                entry = totals.setdefault(b.tier, [0, b.rate_Bps])
                entry[0] += b.cables
            parts = [f"{LINK_TIER_LABELS.get(t, t)} {int(v[0]):,} × "
                     f"{format_si(v[1] * 8, 'b/s')}" for t, v in totals.items()]
            head = ("One box per node; colour: utilization of the link's busier direction."
                    if self.loaded else "One box per node; line width grows with cables.")
            return f"{head} Links (cables × rate per direction): {'; '.join(parts)}."
        text = ("Box: the nodes of one tier in the columns it spans (count × model). Bundle"
                " label: cables × rate per direction")
        if self.loaded:
            text += ("; peak / mean: utilization of the busiest link and the mean over the"
                     " bundle's links (both directions); colour: the peak")
        return text + "."

    def _fit_node_labels(self, in_per_x: float) -> None:
        """Full view: turn a row's labels upright, or label every k-th node, to fit."""
        boxes = self.layout.boxes
        self.rotated.clear()
        self.label_every.clear()
        for r in self.rows:
            members = [b for b in boxes if b.row == r]
            widest = max(text_in(b.label, SMALL_FONT_SIZE)[0] for b in members)
            box_in = min(b.width for b in members) * in_per_x
            if widest + 0.06 <= box_in:
                continue
            self.rotated.add(r)
            pitch_in = self.layout.slots / len(members) * in_per_x
            line_in = text_in("Ag", SMALL_FONT_SIZE)[1]
            self.label_every[r] = max(1, math.ceil((line_in + 0.03) / pitch_in))

    def _draw_bundles(self, fig: Figure, ax: Axes, width_in: float, height_in: float) -> None:
        layout = self.layout
        bundles = layout.bundles
        paths = [g.path for g in self.geometry]
        if self.full:
            widths = [min(3.5, 0.9 + 0.5 * math.log2(max(b.cables, 1))) if not self.loaded
                      else 1.6 for b in bundles]
        else:
            widths = [3.0] * len(bundles)
        styles = ["--" if b.failed_cables == b.cables else "-" for b in bundles]
        lines = LineCollection(paths, linewidths=widths, linestyles=styles, zorder=1,
                               capstyle="butt")
        lines.set_gid("links")
        if self.loaded:
            values = np.array([100 * b.peak_utilization for b in bundles])
            norm = Normalize(0.0, max(100.0, float(values.max()) if len(values) else 100.0))
            lines.set_array(values)
            lines.set_cmap(UTILIZATION_CMAP)
            lines.set_norm(norm)
        else:
            lines.set_color([MEDIUM_COLOURS.get(b.medium, MEDIUM_COLOURS["mixed"])
                             for b in bundles])
        ax.add_collection(lines)
        legend_x = 1 - (RIGHT_IN - 0.25) / width_in
        top = 1 - TOP_IN / height_in
        if self.loaded:
            cax = fig.add_axes((legend_x, top - 0.55 * (1 - TOP_IN / height_in), 0.16 /
                                width_in, 0.5 * (1 - TOP_IN / height_in)))
            bar = fig.colorbar(lines, cax=cax)
            which = ("busier direction of each link" if self.full else
                     "busiest link of each bundle")
            bar.set_label(f"utilization (%)\n{which}", fontsize=8)
            bar.ax.tick_params(labelsize=7)
        else:
            present = sorted({b.medium for b in bundles}, key=list(MEDIUM_COLOURS).index)
            handles = [Line2D([], [], color=MEDIUM_COLOURS[m], lw=3) for m in present]
            fig.legend(handles, [MEDIUM_LABELS[m] for m in present], loc="upper left",
                       bbox_to_anchor=(legend_x, top), fontsize=7, title="link medium",
                       title_fontsize=7.5, frameon=False, alignment="left")
        if self.full:
            return
        for text, g in zip(self.bundle_text, self.geometry, strict=True):
            ax.text(*g.label_xy, text, fontsize=SMALL_FONT_SIZE, ha="center", va=g.label_va,
                    zorder=4, linespacing=1.15,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                          "alpha": 0.85})

    def _draw_boxes(self, ax: Axes) -> None:
        boxes = self.layout.boxes
        counters: dict[int, int] = {}
        for i, (box, text) in enumerate(zip(boxes, self.box_text, strict=True)):
            y = self.y_of_row[box.row]
            height = self._box_height(box)
            left, right = box.x - box.width / 2, box.x + box.width / 2
            if i in self.narrow:
                right = box.x + NARROW_RIGHT
            kind = TIER_KIND[DRAWING_ROWS[box.row]]
            # add_artist, not add_patch: the view is set already, and add_patch would
            # trace every rounded corner's curve to widen data limits nothing reads
            # (about 0.5 ms a box)
            ax.add_artist(FancyBboxPatch(
                (left, y - height / 2), right - left, height,
                boxstyle="round,pad=0,rounding_size=0.04", fc=KIND_COLOURS[kind],
                ec="#555555", lw=0.8, zorder=2, mutation_aspect=0.5))
            if self.full:
                seen = counters.get(box.row, 0)
                counters[box.row] = seen + 1
                if seen % self.label_every.get(box.row, 1):
                    continue
                rotated = box.row in self.rotated
                ax.text((left + right) / 2, y, text, fontsize=SMALL_FONT_SIZE, ha="center",
                        va="center", rotation=90 if rotated else 0, zorder=3)
            else:
                ax.text((left + right) / 2, y, text, fontsize=FONT_SIZE, ha="center",
                        va="center", zorder=3, linespacing=1.15)


def drawn_texts(fig: Figure) -> list[Text]:
    """The visible, non-empty texts of ``fig`` that a drawing shows, laid out.

    Lays the figure out once (no rasterising) on an Agg canvas, which it attaches to
    ``fig`` if it has none: :func:`~topomodel.draw.io.figure_bytes` then draws the PNG
    with the same renderer and finds every text's size in its cache. Tick labels
    outside their axis' view are left out (matplotlib keeps but does not draw them).
    """
    from matplotlib.axis import Axis
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    hidden: set[int] = set()
    for axis in fig.findobj(Axis):
        if not isinstance(axis, Axis):
            continue
        low, high = sorted(axis.get_view_interval())
        slack = 1e-9 * max(abs(high - low), 1e-300)
        for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
            if not low - slack <= tick.get_loc() <= high + slack:
                hidden.update((id(tick.label1), id(tick.label2)))
    return [text for text in fig.findobj(Text)
            if isinstance(text, Text) and text.get_visible() and text.get_text().strip()
            and id(text) not in hidden]


def text_overlaps(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of drawn texts of ``fig`` whose extents intersect (readability check), in
    drawing order; extents that share only an edge (within half a pixel) do not."""
    texts, extents = [], []
    for text in drawn_texts(fig):
        box = text.get_window_extent()
        if box.width > 0 and box.height > 0:
            texts.append(text.get_text())
            extents.append(box.extents)
    if len(texts) < 2:
        return []
    x0, y0, x1, y1 = np.array(extents).T[:, :, None]  # x0 < x1, y0 < y1: sizes > 0
    dx = np.minimum(x1, x1.T) - np.maximum(x0, x0.T)  # width of each pair's overlap
    dy = np.minimum(y1, y1.T) - np.maximum(y0, y0.T)
    first, second = np.nonzero(np.triu((dx > 0.5) & (dy > 0.5), 1))
    return [(texts[i], texts[j]) for i, j in zip(first.tolist(), second.tolist(), strict=True)]
