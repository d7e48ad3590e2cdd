"""Diagrams: the tiered topology, per-tier utilisation, the step breakdown, scaling curves.

Every function returns a :class:`matplotlib.figure.Figure` made with matplotlib's object
API (no pyplot state, no backend switching), so figures can be drawn in threads or
worker processes; :func:`save_figure` writes PNG or SVG by the file's suffix,
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

import io
import math
import textwrap
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch, Patch
from matplotlib.text import Text
from matplotlib.textpath import text_to_path
from matplotlib.ticker import NullLocator

from topomodel.errors import UsageError
from topomodel.fabric import Fabric
from topomodel.units import format_si

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from topomodel.step import StepResult

FIGURE_FORMATS = ("png", "svg")
_SVG_LOCK = threading.Lock()
DPI = 150
"""Pixels per inch of PNG output: sharp on a laptop screen and a projector, and a
14-inch-wide diagram stays near 2,000 pixels."""

ROW_TIERS = ("accelerator", "scaleup", "scaleup_l2", "scaleup_l3", "nic", "leaf", "spine",
             "core")
"""Node tiers (``fabric.nodes['tier']``) from the bottom row of the diagram to the top."""
ROW_LABELS = {"accelerator": "accelerators", "scaleup": "scale-up switches",
              "scaleup_l2": "scale-up L2\nswitches", "scaleup_l3": "scale-up L3\nswitches",
              "nic": "NICs", "leaf": "leaf switches", "spine": "spine switches",
              "core": "core switches"}
LINK_TIER_LABELS = {"scaleup": "scale-up", "scaleup_l2": "scale-up L1–L2",
                    "scaleup_l3": "scale-up L2–L3", "host": "accelerator–NIC",
                    "leaf": "NIC–leaf", "spine": "leaf–spine", "core": "spine–core"}
"""Link tiers are named after their upper end (``fabric`` module); these say both ends."""
DETAILS = ("auto", "full", "aggregate")
AUTO_FULL_MAX_NODES = 64
"""``detail='auto'`` draws a fabric node by node up to this many nodes (one HGX server,
a toy fat-tree): every node and link then stays distinguishable on one page."""
FULL_MAX_NODES = 400
"""``detail='full'`` refuses larger fabrics: beyond this, node labels and links can no
longer be told apart on a page; the aggregated view is the readable one."""
MAX_COLUMNS = 8
"""Most columns of the aggregated view: at ~1.9 inch each, a bundle label such as
"16,384 × 400 Gb/s" stays readable and the page stays under ~20 inches wide."""
MIN_COLUMNS = 4
"""When the natural groups (domains, units, pods) give fewer columns than this but a
finer grouping gives more than :data:`MAX_COLUMNS`, the finer one is split into runs,
so the picture still shows how the upper tiers spread over the cluster."""

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
BOX_WIDTH = 0.76  # aggregated box width, in columns
BOX_HEIGHT = 0.44  # box height, in rows
ROTATED_BOX_HEIGHT = 0.72  # full view: boxes whose labels are turned upright
LANE_OFFSET = 0.27  # a bundle that passes a row runs this far right of the column centre
NARROW_RIGHT = 0.13  # right edge of a box that leaves room for such a lane, from centre
FULL_BOX_SHARE = 0.82  # full view: box width / spacing of its row's nodes
FULL_BOX_MAX = 2.5  # full view: widest box, in node slots (a lone core switch)
PASSING_CLEARANCE = 0.2  # full view: room kept between a passing link and a box, in slots
LOOP_BULGE = 0.14  # links inside one box: how far the loop reaches out, in columns
LABEL_PAD_IN = 0.18  # horizontal clearance kept around a label, inches
TITLE_SIZE = 12.0
FONT_SIZE = 8.0
SMALL_FONT_SIZE = 7.0
LAYOUT_ATTEMPTS = 3  # redraw on a larger page at most this often to separate labels
GROWTH = 1.25  # page growth per attempt

UTILISATION_CMAP = "viridis"
"""Perceptually uniform and readable in grey: dark = idle, yellow = saturated."""
MEDIUM_COLOURS = {"electrical": "#4d4d4d", "pcie": "#8c564b", "copper": "#d95f02",
                  "mmf": "#1b9e77", "smf": "#7570b3", "ocs": "#e7298a", "optical": "#66a61e",
                  "mixed": "#a6a6a6"}
MEDIUM_LABELS = {"electrical": "board / backplane", "pcie": "PCIe", "copper": "copper cable",
                 "mmf": "multimode optics", "smf": "single-mode optics",
                 "ocs": "optics + circuit switch", "optical": "optics",
                 "mixed": "mixed media"}
MEDIUM_SHORT = {"electrical": "board", "pcie": "PCIe", "copper": "copper", "mmf": "MMF",
                "smf": "SMF", "ocs": "OCS", "optical": "optics"}
KIND_COLOURS = {"accelerator": "#cfe2f3", "scaleup_switch": "#d9ead3", "nic": "#fce5cd",
                "switch": "#e4dcf1"}
ROW_KINDS = {"accelerator": "accelerator", "scaleup": "scaleup_switch",
             "scaleup_l2": "scaleup_switch", "scaleup_l3": "scaleup_switch", "nic": "nic",
             "leaf": "switch", "spine": "switch", "core": "switch"}
STEP_COLOURS = {"compute": "#4e79a7", "pipeline bubble": "#bab0ac",
                "exposed communication": "#f28e2b", "synchronisation wait": "#e15759",
                "bandwidth wall": "#ffbe7d", "latency wall": "#86bcb6",
                "topology wall": "#d37295", "sync wall": "#b07aa1"}


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Box:
    """A drawn box: one node (full view) or a tier's nodes in a run of columns.

    ``x`` (centre) and ``width`` are in columns (aggregated) or node slots (full);
    ``row`` indexes :data:`ROW_TIERS`.
    """

    row: int
    x: float
    width: float
    nodes: int
    models: tuple[str, ...]
    planes: int  # distinct scale-out or supernode planes among the nodes (0: none)
    label: str  # node name (full), column name (aggregated, accelerator row), or ''
    first_column: int = -1  # aggregated view: the columns the box covers
    last_column: int = -1


@dataclass(frozen=True)
class Bundle:
    """The links between two boxes (``lower == upper``: links inside one box).

    Cables count physical links once, not per direction; rates and capacities are per
    direction; utilisations are busy time / collective time over the bundle's link
    rows, both directions (``nan`` when no load was given).
    """

    lower: int  # box index; the lower row's box
    upper: int
    tier: str  # link tier (``fabric.links['tier']``)
    cables: int
    links: int  # link-table arcs, once per pair of directions
    rate_Bps: float  # one cable's rate per direction (the lowest, if they differ)
    max_rate_Bps: float
    capacity_Bps: float  # all cables, one direction
    medium: str  # one of ``fabric.MEDIA``, or 'mixed'
    media: tuple[str, ...]  # every medium of the bundle's cables
    failed_cables: int
    peak_utilisation: float  # busiest link row
    mean_utilisation: float  # mean over link rows


@dataclass(frozen=True, eq=False)
class TopologyLayout:
    """What the topology diagram draws: boxes and bundles as plain numbers."""

    detail: str  # 'full' or 'aggregate'
    boxes: tuple[Box, ...]
    bundles: tuple[Bundle, ...]
    columns: tuple[str, ...]  # aggregated view: column names, left to right
    grouping: str  # aggregated view: what a column holds, e.g. '3 pods each'
    slots: float  # x extent: columns (aggregated) or node slots (full)
    node_box: np.ndarray  # box index of every node


def topology_layout(fabric: Fabric, *, link_utilisation: np.ndarray | None = None,
                    detail: str = "auto", max_columns: int = MAX_COLUMNS) -> TopologyLayout:
    """Boxes and link bundles of the topology diagram (utilisation as 0-1+ fractions).

    Parameters
    ----------
    fabric
        The built fabric.
    link_utilisation
        Per row of ``fabric.links``: busy time / collective time (0-1, above 1 when a
        link is overcommitted), e.g. ``run.timing.link_busy_s / run.time_s``.
    detail
        ``full`` (one box per node), ``aggregate`` (one box per tier and column) or
        ``auto`` (full up to :data:`AUTO_FULL_MAX_NODES` nodes).
    max_columns
        Most columns of the aggregated view.

    Raises
    ------
    UsageError
        For an unknown ``detail``, or ``full`` on a fabric of more than
        :data:`FULL_MAX_NODES` nodes.
    ValueError
        If ``link_utilisation`` does not have one value per link row.
    """
    detail = resolve_detail(fabric, detail)
    utilisation = _utilisation(fabric, link_utilisation)
    rows = _node_rows(fabric)
    if detail == "full":
        return _full_layout(fabric, rows, utilisation)
    return _aggregate_layout(fabric, rows, utilisation, max(1, max_columns))


def resolve_detail(fabric: Fabric, detail: str = "auto") -> str:
    """``full`` or ``aggregate``: what ``detail`` means for this fabric.

    Raises
    ------
    UsageError
        For an unknown ``detail``, or ``full`` on more than :data:`FULL_MAX_NODES` nodes.
    """
    if detail not in DETAILS:
        raise UsageError(f"unknown detail {detail!r}; choose from {', '.join(DETAILS)}")
    count = len(fabric.nodes)
    if detail == "auto":
        return "full" if count <= AUTO_FULL_MAX_NODES else "aggregate"
    if detail == "full" and count > FULL_MAX_NODES:
        raise UsageError(f"full detail draws at most {FULL_MAX_NODES} nodes and this fabric"
                         f" has {count:,}; use --detail aggregate")
    return detail


def _utilisation(fabric: Fabric, link_utilisation: np.ndarray | None) -> np.ndarray | None:
    if link_utilisation is None:
        return None
    values = np.asarray(link_utilisation, dtype=float)
    if values.shape != (len(fabric.links),):
        raise ValueError(f"link_utilisation has shape {values.shape}; expected one value per"
                         f" link row ({len(fabric.links)},)")
    return np.clip(np.nan_to_num(values, nan=0.0), 0.0, None)


def _node_rows(fabric: Fabric) -> np.ndarray:
    """Row of every node in :data:`ROW_TIERS` (unknown tiers go to the top)."""
    column = fabric.nodes["tier"]
    per_category = np.array([ROW_TIERS.index(c) if c in ROW_TIERS else len(ROW_TIERS) - 1
                             for c in column.cat.categories], dtype=np.int64)
    return per_category[column.cat.codes.to_numpy()]


def _full_layout(fabric: Fabric, rows: np.ndarray,
                 utilisation: np.ndarray | None) -> TopologyLayout:
    """One box per node; a row's nodes sorted by the mean position of their lower
    neighbours, so links run as straight up as the wiring allows."""
    count = len(fabric.nodes)
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    present = [r for r in range(len(ROW_TIERS)) if (rows == r).any()]
    slots = max((int((rows == r).sum()) for r in present), default=1)
    x = np.zeros(count)
    down = rows[dst] < rows[src]
    pitch_of: dict[int, float] = {}
    for r in present:
        members = np.flatnonzero(rows == r)
        mask = down & (rows[src] == r)
        total = np.bincount(src[mask], weights=x[dst[mask]], minlength=count)
        seen = np.bincount(src[mask], minlength=count)
        centre = np.where(seen > 0, total / np.maximum(seen, 1), 0.0)[members]
        order = members[np.lexsort((members, centre))]
        pitch_of[r] = slots / len(members)
        x[order] = (np.arange(len(members)) + 0.5) * pitch_of[r]
    width = np.array([min(FULL_BOX_SHARE * pitch_of[int(r)], FULL_BOX_MAX) for r in rows])
    _clear_passing_links(width, x, rows, src, dst)
    names = fabric.nodes["name"].astype(str).to_numpy()
    models = fabric.nodes["model"].astype(str).to_numpy()
    planes = fabric.nodes["plane"].to_numpy()
    boxes = tuple(Box(row=int(rows[i]), x=float(x[i]), width=float(width[i]), nodes=1,
                      models=(str(models[i]),), planes=int(planes[i] >= 0),
                      label=str(names[i])) for i in range(count))
    node_box = np.arange(count)
    return TopologyLayout("full", boxes, _bundles(fabric, node_box, count, utilisation), (),
                          "", float(slots), node_box)


def _clear_passing_links(width: np.ndarray, x: np.ndarray, rows: np.ndarray, src: np.ndarray,
                         dst: np.ndarray) -> None:
    """Narrow the boxes of rows that links pass on their way up (accelerator to NIC past
    the scale-up switches) so the links run between boxes, not through them."""
    level = np.cumsum(np.bincount(rows, minlength=len(ROW_TIERS)) > 0) - 1  # drawn row
    lower = np.where(rows[src] <= rows[dst], src, dst)
    upper = np.where(rows[src] <= rows[dst], dst, src)
    skip = level[rows[upper]] - level[rows[lower]] > 1
    for r in np.unique(rows):
        passing = skip & (level[rows[lower]] < level[r]) & (level[r] < level[rows[upper]])
        if not passing.any():
            continue
        share = (level[r] - level[rows[lower[passing]]]) / (
            level[rows[upper[passing]]] - level[rows[lower[passing]]])
        crossing = np.sort(x[lower[passing]] + (x[upper[passing]] - x[lower[passing]]) * share)
        members = np.flatnonzero(rows == r)
        at = np.searchsorted(crossing, x[members])
        left = np.where(at > 0, x[members] - crossing[np.maximum(at - 1, 0)], np.inf)
        right = np.where(at < len(crossing), crossing[np.minimum(at, len(crossing) - 1)]
                         - x[members], np.inf)
        free = 2 * np.minimum(left, right) - PASSING_CLEARANCE
        width[members] = np.where(free >= 0.4 * width[members],
                                  np.minimum(width[members], free), width[members])


def _aggregate_layout(fabric: Fabric, rows: np.ndarray, utilisation: np.ndarray | None,
                      max_columns: int) -> TopologyLayout:
    """One box per tier and run of columns.

    A node with a system (accelerator, in-system switch chip, NIC) sits in its system's
    column; a switch covers the columns of the nodes below it; overlapping runs of one
    row merge so boxes never overlap.
    """
    nodes = fabric.nodes
    column_of_system, columns, grouping = _columns(fabric, max_columns)
    n_columns = len(columns)
    count = len(nodes)
    system = nodes["system"].to_numpy()
    has_system = system >= 0
    first = np.full(count, n_columns, np.int64)
    last = np.full(count, -1, np.int64)
    first[has_system] = last[has_system] = column_of_system[system[has_system]]
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    climbs = (rows[dst] < rows[src]) & ~has_system[src]
    for r in range(len(ROW_TIERS)):  # bottom up: the rows below are final
        mask = climbs & (rows[src] == r)
        if mask.any():
            np.minimum.at(first, src[mask], first[dst[mask]])
            np.maximum.at(last, src[mask], last[dst[mask]])
    alone = last < 0  # nothing below it: spread over every column
    first[alone], last[alone] = 0, n_columns - 1
    node_box = np.empty(count, np.int64)
    runs: list[tuple[int, int, int]] = []
    for r in range(len(ROW_TIERS)):
        members = np.flatnonzero(rows == r)
        if not len(members):
            continue
        merged: list[list[int]] = []
        spans = np.unique(first[members] * (n_columns + 1) + last[members])
        for lo, hi in zip(*np.divmod(spans, n_columns + 1), strict=True):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        starts = np.array([m[0] for m in merged])
        node_box[members] = len(runs) + np.searchsorted(starts, first[members], "right") - 1
        runs += [(r, lo, hi) for lo, hi in merged]
    model_names = list(nodes["model"].cat.categories)
    model = nodes["model"].cat.codes.to_numpy().astype(np.int64)
    plane = nodes["plane"].to_numpy()
    n_planes = int(plane.max()) + 2
    per_model = np.bincount(node_box * len(model_names) + model,
                            minlength=len(runs) * len(model_names)).reshape(len(runs), -1)
    per_plane = np.bincount(node_box * n_planes + plane + 1,
                            minlength=len(runs) * n_planes).reshape(len(runs), -1)
    boxes = []
    for b, (r, lo, hi) in enumerate(runs):
        boxes.append(Box(row=r, x=(lo + hi) / 2, width=hi - lo + BOX_WIDTH,
                         nodes=int(per_model[b].sum()),
                         models=tuple(str(model_names[m]) for m in np.flatnonzero(per_model[b])),
                         planes=int((per_plane[b, 1:] > 0).sum()),
                         label=columns[lo] if r == 0 and lo == hi else "",
                         first_column=lo, last_column=hi))
    return TopologyLayout("aggregate", tuple(boxes),
                          _bundles(fabric, node_box, len(boxes), utilisation), columns,
                          grouping, float(n_columns), node_box)


def _columns(fabric: Fabric, max_columns: int) -> tuple[np.ndarray, tuple[str, ...], str]:
    """Column of every system, the column names, and what a column holds.

    Candidate groupings, finest first: scale-up domain (a system when domains are
    systems, or when there is no scale-up), scalable unit and pod (from the leaves the
    system's NICs reach). Only groupings of whole domains qualify, so in-system and
    supernode switches always fall in one column.
    """
    nodes, links = fabric.nodes, fabric.links
    system = nodes["system"].to_numpy()
    n_systems = int(system.max()) + 1
    acc = fabric.accelerators
    domain = np.arange(n_systems)
    acc_domain = nodes["domain"].to_numpy()[acc]
    if len(acc) and (acc_domain >= 0).all():
        domain = np.zeros(n_systems, np.int64)
        domain[system[acc]] = acc_domain
    n_domains = len(np.unique(domain))
    per_system = n_domains == n_systems
    candidates = [("system", "systems", domain) if per_system else
                  ("domain", "domains", domain)]
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    to_leaf = (nodes["kind"] == "nic").to_numpy()[src] & (nodes["tier"] == "leaf").to_numpy()[
        dst]
    for name, plural in (("unit", "units"), ("pod", "pods")):
        if to_leaf.any():
            values = np.full(n_systems, -1, np.int64)
            values[system[src[to_leaf]]] = nodes[name].to_numpy()[dst[to_leaf]]
            candidates.append((name, plural, values))
    valid = []
    for name, plural, values in candidates:
        groups = len(np.unique(values))
        if len(np.unique(np.stack([domain, values], 1), axis=0)) == n_domains:
            valid.append((groups, name, plural, values))
    valid.sort(key=lambda v: -v[0])  # finest first
    fitting = [v for v in valid if min(MIN_COLUMNS, max_columns) <= v[0] <= max_columns]
    too_many = [v for v in valid if v[0] > max_columns]
    run = 1
    if fitting:
        groups, name, plural, values = fitting[0]
    elif too_many:
        groups, name, plural, values = too_many[-1]
        run = math.ceil(groups / max_columns)
    else:
        groups, name, plural, values = valid[0]
    keys, rank = np.unique(values, return_inverse=True)
    column = rank // run
    names = []
    for c in range(int(column.max()) + 1):
        inside = keys[c * run:(c + 1) * run]
        names.append(f"{name} {inside[0]}" if len(inside) == 1 else
                     f"{plural} {inside[0]}–{inside[-1]}")
    grouping = (f"{run} {plural} each" if run > 1 else f"one {name} each")
    return column, tuple(names), grouping


def _bundles(fabric: Fabric, node_box: np.ndarray, n_boxes: int,
             utilisation: np.ndarray | None) -> tuple[Bundle, ...]:
    """The link table summed over (lower box, upper box, tier), with array arithmetic."""
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    box_a, box_b = node_box[src], node_box[dst]
    tiers = list(links["tier"].cat.categories)
    tier = links["tier"].cat.codes.to_numpy().astype(np.int64)
    key = (np.minimum(box_a, box_b) * n_boxes + np.maximum(box_a, box_b)) * len(tiers) + tier
    once = (box_a < box_b) | ((box_a == box_b) & (src < dst))  # one row per direction pair
    size = n_boxes * n_boxes * len(tiers)
    k = key[once]
    arcs = np.bincount(k, minlength=size)
    cables = links["cables"].to_numpy()[once]
    sum_cables = np.bincount(k, weights=cables, minlength=size)
    sum_capacity = np.bincount(k, weights=links["capacity_Bps"].to_numpy()[once],
                               minlength=size)
    sum_failed = np.bincount(k, weights=cables * links["failed"].to_numpy()[once],
                             minlength=size)
    rate = links["rate_Bps"].to_numpy()[once]
    low_rate, high_rate = np.full(size, np.inf), np.zeros(size)
    np.minimum.at(low_rate, k, rate)
    np.maximum.at(high_rate, k, rate)
    media = list(links["medium"].cat.categories)
    medium = links["medium"].cat.codes.to_numpy().astype(np.int64)[once]
    has_medium = np.bincount(k * len(media) + medium, minlength=size * len(media)).reshape(
        size, len(media)) > 0
    peak = mean = np.full(size, np.nan)
    if utilisation is not None:
        peak = np.zeros(size)
        np.maximum.at(peak, key, utilisation)
        mean = np.bincount(key, weights=utilisation, minlength=size) / np.maximum(
            np.bincount(key, minlength=size), 1)
    out = []
    for index in np.flatnonzero(arcs).tolist():
        pair, t = divmod(index, len(tiers))
        lower, upper = divmod(pair, n_boxes)
        out.append(Bundle(
            lower=lower, upper=upper, tier=str(tiers[t]), cables=int(sum_cables[index]),
            links=int(arcs[index]), rate_Bps=float(low_rate[index]),
            max_rate_Bps=float(high_rate[index]), capacity_Bps=float(sum_capacity[index]),
            medium=str(media[int(np.argmax(has_medium[index]))]) if (
                has_medium[index].sum() == 1) else "mixed",
            media=tuple(str(media[m]) for m in np.flatnonzero(has_medium[index])),
            failed_cables=int(sum_failed[index]), peak_utilisation=float(peak[index]),
            mean_utilisation=float(mean[index])))
    return tuple(out)


# --------------------------------------------------------------------------- topology


def topology_figure(fabric: Fabric, *, link_utilisation: np.ndarray | None = None,
                    detail: str = "auto", title: str | None = None) -> Figure:
    """The tiered topology, link load as colour (utilisation in %) when given.

    Parameters
    ----------
    fabric
        The built fabric.
    link_utilisation
        Per row of ``fabric.links``: busy time / collective time (0-1, above 1 when
        overcommitted), e.g. ``run.timing.link_busy_s / run.time_s`` for a
        :class:`~topomodel.route_report.CollectiveRun`. The full view colours each link
        by its busier direction; the aggregated view colours each bundle by its busiest
        link and labels the peak and the mean.
    detail
        ``auto``, ``full`` or ``aggregate`` (see :func:`topology_layout`).
    title
        Figure title (default: the design's name).

    Raises
    ------
    UsageError
        For an unknown ``detail`` or ``full`` on a large fabric.
    """
    layout = topology_layout(fabric, link_utilisation=link_utilisation, detail=detail)
    drawing = _Drawing(fabric, layout, loaded=link_utilisation is not None,
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


@lru_cache(maxsize=4096)
def _text_in(text: str, size: float, bold: bool = False) -> tuple[float, float]:
    """Width and height of ``text`` at ``size`` points, inches (multi-line aware)."""
    lines = text.split("\n")
    prop = FontProperties(size=size, weight="bold" if bold else "normal")
    width = max(text_to_path.get_text_width_height_descent(line, prop, ismath=False)[0]
                for line in lines)
    return width / 72, len(lines) * size * 1.25 / 72


def _fit(text: str, width_in: float, size: float, *, bold: bool = False,
         smallest: float = 9.0) -> tuple[str, float]:
    """``text`` and a font size (down to ``smallest``) that fit ``width_in`` inches on
    one line; shortened with an ellipsis when even the smallest size is too wide."""
    while size > smallest and _text_in(text, size, bold)[0] > width_in:
        size -= 0.5
    while len(text) > 8 and _text_in(text, size, bold)[0] > width_in:
        text = text[:int(len(text) * 0.9) - 1].rstrip() + "…"
    return text, size


def _wrap(text: str, width: int, lines: int = 2) -> list[str]:
    """``text`` in at most ``lines`` lines of ``width`` characters (the last shortened)."""
    out = textwrap.wrap(text, max(width, 30))
    if len(out) > lines:
        rest = " ".join(out[lines - 1:])
        out[lines - 1:] = [textwrap.shorten(rest, max(width, 30), placeholder=" …")]
    return out


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
        lines.append(f"peak {bundle.peak_utilisation:.0%} · mean"
                     f" {bundle.mean_utilisation:.0%}")
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
    kind = s.get("scaleup", "none")
    link = s.get("scaleup_link", "")
    if kind == "torus":
        shape = "×".join(map(str, s["torus_shape"]))
        up = f"{shape} {'torus' if s.get('wraparound') else 'mesh'} ({link})"
    elif kind == "supernode":
        up = (f"supernodes of {s['systems_per_domain']} systems, {s['supernode_planes']}"
              f" planes ({link})")
    elif kind == "none":
        up = "none"
    else:
        up = f"{kind.replace('_', ' ')} ({link})"
    out = s.get("scaleout", "none")
    if out == "none":
        down = "none"
    else:
        rail = (", rail-only" if s.get("rail_only") else
                ", rail-optimized" if s.get("rail_optimized") else "")
        planes = f", {s['planes']} planes" if s.get("planes", 1) > 1 else ""
        down = f"{s.get('fat_tree_tiers', 1)}-tier fat-tree of {s['switch']}{rail}{planes}"
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
        self.box_text = [_box_text(b, ROW_TIERS[b.row]) if not self.full else b.label
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
                need = (_text_in(self.box_text[i], FONT_SIZE)[0] + LABEL_PAD_IN) / width
                wide = LEFT_IN + RIGHT_IN + layout.slots * need > COMFORT_WIDTH_IN
                if wide and " × " in self.box_text[i]:  # put the model under the count
                    self.box_text[i] = self.box_text[i].replace(" × ", "\n× ", 1)
                    need = (_text_in(self.box_text[i], FONT_SIZE)[0] + LABEL_PAD_IN) / width
                per_slot = max(per_slot, need)
            for text in self.bundle_text:
                per_slot = max(per_slot, _text_in(text, SMALL_FONT_SIZE)[0] + LABEL_PAD_IN)
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
                      [ROW_LABELS[ROW_TIERS[r]] for r in self.rows], fontsize=9)
        ax.tick_params(axis="y", length=0)
        in_per_x = axes_w / (layout.slots - margin - x_lo)
        if self.full:
            self._fit_node_labels(in_per_x)
            self.geometry, self.narrow = self._geometry()
        self._draw_bundles(fig, ax, width_in, height_in)
        self._draw_boxes(ax)
        title, size = _fit(self.title, width_in - 0.8, TITLE_SIZE, bold=True)
        fig.text(0.5 / width_in, 1 - 0.3 / height_in, title, fontsize=size,
                 fontweight="bold", va="top")
        fig.text(0.5 / width_in, 1 - 0.6 / height_in, "\n".join(_wrap(
                     self._subtitle(), int((width_in - 0.8) * 72 / (0.55 * 8.5)))),
                 fontsize=8.5, va="top", color="#333333", linespacing=1.3)
        fig.text(0.5 / width_in, 0.12 / height_in, "\n".join(_wrap(
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
            head = ("One box per node; colour: utilisation of the link's busier direction."
                    if self.loaded else "One box per node; line width grows with cables.")
            return f"{head} Links (cables × rate per direction): {'; '.join(parts)}."
        text = ("Box: the nodes of one tier in the columns it spans (count × model). Bundle"
                " label: cables × rate per direction")
        if self.loaded:
            text += ("; peak / mean: utilisation of the busiest link and the mean over the"
                     " bundle's links (both directions); colour: the peak")
        return text + "."

    def _fit_node_labels(self, in_per_x: float) -> None:
        """Full view: turn a row's labels upright, or label every k-th node, to fit."""
        boxes = self.layout.boxes
        self.rotated.clear()
        self.label_every.clear()
        for r in self.rows:
            members = [b for b in boxes if b.row == r]
            widest = max(_text_in(b.label, SMALL_FONT_SIZE)[0] for b in members)
            box_in = min(b.width for b in members) * in_per_x
            if widest + 0.06 <= box_in:
                continue
            self.rotated.add(r)
            pitch_in = self.layout.slots / len(members) * in_per_x
            line_in = _text_in("Ag", SMALL_FONT_SIZE)[1]
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
            values = np.array([100 * b.peak_utilisation for b in bundles])
            norm = Normalize(0.0, max(100.0, float(values.max()) if len(values) else 100.0))
            lines.set_array(values)
            lines.set_cmap(UTILISATION_CMAP)
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
            bar.set_label(f"utilisation (%)\n{which}", fontsize=8)
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
            kind = ROW_KINDS[ROW_TIERS[box.row]]
            ax.add_patch(FancyBboxPatch(
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

    Lays the figure out once (no rasterising); tick labels outside their axis' view
    are left out (matplotlib keeps but does not draw them).
    """
    from matplotlib.axis import Axis

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
    """Pairs of drawn texts of ``fig`` whose extents intersect (readability check)."""
    extents = []
    for text in drawn_texts(fig):
        box = text.get_window_extent()
        if box.width > 0 and box.height > 0:
            extents.append((text.get_text(), box))
    out = []
    for i, (text_a, a) in enumerate(extents):
        for text_b, b in extents[i + 1:]:
            if a.overlaps(b) and not _touching(a, b):
                out.append((text_a, text_b))
    return out


def _touching(a: Any, b: Any) -> bool:
    """Extents that share only an edge (within half a pixel) do not overlap."""
    dx = min(a.x1, b.x1) - max(a.x0, b.x0)
    dy = min(a.y1, b.y1) - max(a.y0, b.y0)
    return dx <= 0.5 or dy <= 0.5


# --------------------------------------------------------------------------- charts


def tier_utilisation_figure(tiers: Sequence[Mapping[str, Any]], *,
                            title: str | None = None) -> Figure:
    """Peak and mean link utilisation (%) per link tier, with each tier's capacity.

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
    ax.set_ylabel("utilisation (%): busy time / collective time")
    ax.set_xlabel("link tier, its capacity (all links, one direction)\nand the share of"
                  " the bandwidth time whose slowest link it holds", fontsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    heading, size = _fit(title or "Link utilisation per tier", fig.get_figwidth() - 1.2, 11.0)
    ax.set_title(heading, fontsize=size, loc="left")
    return fig


def step_figure(result: StepResult, *, title: str | None = None) -> Figure:
    """One training step as stacked bars: compute, pipeline bubble, exposed
    communication and wait; under it, exposed communication and wait split into the
    bandwidth, latency, topology and synchronisation walls. Times in ms (or s)."""
    total = result.step_time_s
    scale, unit = (1e3, "ms") if total < 10 else (1.0, "s")
    parts = [("compute", result.compute_s), ("pipeline bubble", result.bubble_s),
             ("exposed communication", result.exposed_comm_s),
             ("synchronisation wait", result.wait_s)]
    walls = [("bandwidth wall", result.walls.get("bandwidth_s", 0.0)),
             ("latency wall", result.walls.get("latency_s", 0.0)),
             ("topology wall", result.walls.get("topology_s", 0.0)),
             ("sync wall", result.walls.get("sync_s", 0.0))]
    fig = Figure(figsize=(10, 4.2), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    span = max(total, result.compute_s + result.bubble_s + sum(v for _, v in walls))
    width_in = (10 - 2.0) / 1.15  # the bars' share of the page, roughly, for value labels

    def amount(value_s: float) -> str:
        value = value_s * scale
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
        return f"{value:,.{digits}f} {unit}"

    for y, segments, start in ((1.0, parts, 0.0),
                               (0.0, walls, result.compute_s + result.bubble_s)):
        left = start
        for name, value in segments:
            ax.barh(y, value * scale, left=left * scale, height=0.55,
                    color=STEP_COLOURS[name], edgecolor="white", lw=0.8)
            text = amount(value)
            if value > 0 and _text_in(text, 7.5)[0] + 0.1 < value / span * width_in:
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
    heading, size = _fit(title or f"{result.model}: step {format_si(total, 's')}, MFU"
                         f" {result.mfu:.1%}", fig.get_figwidth() - 0.4, 11.0)
    fig.suptitle(heading, fontsize=size, x=0.01, ha="left")
    ax.set_title(f"{shape} on {lay.world:,} accelerators; exposed communication + wait ="
                 f" {result.comm_share:.1%} of the step", fontsize=8.5, loc="left",
                 color="#333333")
    return fig


def scaling_figure(points: Sequence[Any], *, title: str) -> Figure:
    """Throughput (million tokens/s), MFU and scaling efficiency (%) against accelerator
    count; ``points`` are :class:`~topomodel.studies.ScalePoint` objects."""
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
    heading, size = _fit(title, fig.get_figwidth() - 1.6, 11.0)
    left.set_title(heading, fontsize=size, loc="left")
    return fig


# --------------------------------------------------------------------------- output


def figure_format(path: str | Path) -> str:
    """``png`` or ``svg`` from the file's suffix.

    Raises
    ------
    UsageError
        For any other suffix.

    Examples
    --------
    >>> figure_format("out/topology.SVG")
    'svg'
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FIGURE_FORMATS:
        raise UsageError(f"{path}: a diagram file must end in .png or .svg")
    return suffix


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    """``fig`` encoded as PNG (at :data:`DPI`) or SVG (text drawn as paths, so it needs
    no fonts; no date and fixed ids, so the same figure gives the same bytes); the
    figure is cleared afterwards.

    Raises
    ------
    UsageError
        For a format other than ``png`` or ``svg``.
    """
    if fmt not in FIGURE_FORMATS:
        raise UsageError(f"unknown image format {fmt!r}; choose png or svg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buffer = io.BytesIO()
    FigureCanvasAgg(fig)  # a canvas of its own: no pyplot, no global backend
    if fmt == "svg":
        # the SVG writer reads its id salt and font mode from the global rcParams: set
        # them under a lock so threads do not see each other's settings
        with _SVG_LOCK, mpl.rc_context({"svg.hashsalt": "topomodel", "svg.fonttype": "path"}):
            fig.savefig(buffer, format="svg", metadata={"Date": None})
    else:
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    fig.clear()
    return buffer.getvalue()


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as PNG or SVG by its suffix, atomically (a temporary
    file moved into place); the figure is cleared afterwards. Returns the path.

    Raises
    ------
    UsageError
        For a suffix other than ``.png`` or ``.svg``.
    OSError
        When the file cannot be written (nothing is left behind).
    """
    from topomodel.files import atomic_bytes

    target = Path(path)
    return atomic_bytes(target, figure_bytes(fig, figure_format(target)))
