"""Where the topology diagram puts its boxes and bundles, as plain numbers (no
matplotlib): node by node for small fabrics, aggregated for large ones."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from topomodel.arrays import distinct
from topomodel.draw.runs import (
    LinkRuns,
    add_into,
    link_runs,
    run_rows,
    run_starts,
    segments,
    sequential_sums,
)
from topomodel.errors import UsageError
from topomodel.fabric.scaleout import REGISTRY as SCALEOUT_KINDS
from topomodel.fabric.tables import Coded, Fabric, ignores_failures
from topomodel.vocabulary import SCALEUP_TIERS

DETAILS = ("auto", "full", "aggregate")

DRAWING_ROWS = tuple(dict.fromkeys(("accelerator", *SCALEUP_TIERS, *(
    row for kind in SCALEOUT_KINDS.values() for row in kind.drawing_rows))))
"""The diagram's rows of node tiers, bottom up: the accelerators, the scale-up switch
levels, then each scale-out kind's rows
(:attr:`~topomodel.fabric.scaleout.kind.ScaleoutKind.drawing_rows`; the NICs, leaves,
spines and cores of the fat-trees)."""


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


@dataclass(frozen=True)
class Box:
    """A drawn box: one node (full view) or a tier's nodes in a run of columns.

    ``x`` (centre) and ``width`` are in columns (aggregated) or node slots (full);
    ``row`` indexes :data:`DRAWING_ROWS` (bottom row first).
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
    direction; utilizations are busy time / collective time over the bundle's link
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
    peak_utilization: float  # busiest link row
    mean_utilization: float  # mean over link rows


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


def topology_layout(fabric: Fabric, *, link_utilization: np.ndarray | None = None,
                    detail: str = "auto", max_columns: int = MAX_COLUMNS) -> TopologyLayout:
    """Boxes and link bundles of the topology diagram (utilization as 0-1+ fractions).

    The boxes and what the bundles hold that neither failures nor loads change are
    found once per fabric (:meth:`~topomodel.fabric.tables.Fabric.derived`, shared
    with its copies that only fail other parts); the failed cables and the loads are
    summed on each call.

    Parameters
    ----------
    fabric
        The built fabric.
    link_utilization
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
        If ``link_utilization`` does not have one value per link row.
    """
    detail = resolve_detail(fabric, detail)
    utilization = _utilization(fabric, link_utilization)
    if detail == "full":
        view = fabric.derived(_full_view)
    else:
        view = fabric.derived(_aggregate_view, max(1, max_columns))
    return TopologyLayout(detail, view.boxes, _bundles(fabric, view.sums, utilization),
                          view.columns, view.grouping, view.slots, view.node_box)


def resolve_detail(fabric: Fabric, detail: str = "auto") -> str:
    """``full`` or ``aggregate``: what ``detail`` means for this fabric.

    Raises
    ------
    UsageError
        For an unknown ``detail``, or ``full`` on more than :data:`FULL_MAX_NODES` nodes.
    """
    if detail not in DETAILS:
        raise UsageError(f"unknown detail {detail!r}; choose from {', '.join(DETAILS)}")
    count = len(fabric.node_arrays)
    if detail == "auto":
        return "full" if count <= AUTO_FULL_MAX_NODES else "aggregate"
    if detail == "full" and count > FULL_MAX_NODES:
        raise UsageError(f"full detail draws at most {FULL_MAX_NODES} nodes and this fabric"
                         f" has {count:,}; use --detail aggregate")
    return detail


def _utilization(fabric: Fabric, link_utilization: np.ndarray | None) -> np.ndarray | None:
    """The loads as given, not below 0: NaN as 0, infinity as the largest float."""
    if link_utilization is None:
        return None
    values = np.asarray(link_utilization, dtype=float)
    if values.shape != (len(fabric.link_arrays),):
        raise ValueError(f"link_utilization has shape {values.shape}; expected one value per"
                         f" link row ({len(fabric.link_arrays)},)")
    clipped = np.clip(values, 0.0, None)  # NaN stays NaN, -inf becomes 0
    if len(clipped) and not math.isfinite(float(clipped.max())):  # rare: one more pass
        clipped = np.nan_to_num(clipped, nan=0.0)
    return clipped


@dataclass(frozen=True, eq=False)
class _LinkSums:
    """Per bundle (a key of :class:`~topomodel.draw.runs.LinkRuns` with rows counted
    once), what its link rows hold that failures and loads do not change: arcs and
    cables counted once per pair of directions, the capacity of those rows (bytes/s,
    added in row order), their lowest and highest rate (bytes/s) and their media."""

    runs: LinkRuns
    keys: np.ndarray  # the bundles' keys, ascending
    bundle_of_run: np.ndarray  # per run: its bundle, or len(keys) for none
    arcs: np.ndarray
    cables: np.ndarray
    capacity_Bps: np.ndarray
    low_rate_Bps: np.ndarray
    high_rate_Bps: np.ndarray
    has_medium: np.ndarray  # (bundles, media) bool


@dataclass(frozen=True, eq=False)
class _View:
    """The part of a layout that depends on the fabric alone (not failures, not loads)."""

    boxes: tuple[Box, ...]
    node_box: np.ndarray  # read-only
    columns: tuple[str, ...]
    grouping: str
    slots: float
    sums: _LinkSums


def _link_sums(fabric: Fabric, node_box: np.ndarray, n_boxes: int) -> _LinkSums:
    """The failure- and load-independent sums of every bundle, over the link runs."""
    links = fabric.links
    tier, medium = links["tier"], links["medium"]
    runs = link_runs(node_box, n_boxes, links["src"].to_numpy(), links["dst"].to_numpy(),
                     tier.cat.codes.to_numpy(), len(tier.cat.categories),
                     medium.cat.codes.to_numpy())
    keys = distinct(runs.key[runs.once])
    count = len(keys)
    at = np.minimum(np.searchsorted(keys, runs.key), max(count - 1, 0))
    found = (keys[at] == runs.key) if count else np.zeros(len(runs.key), bool)
    bundle_of_run = np.where(found, at, count)
    once = np.flatnonzero(runs.once)
    bundle = bundle_of_run[once]
    first = runs.bounds[:-1]
    low_rate, high_rate = np.full(count, np.inf), np.zeros(count)
    cables = np.zeros(count, np.int64)
    if len(first):
        rate = links["rate_Bps"].to_numpy()
        np.minimum.at(low_rate, bundle, np.minimum.reduceat(rate, first)[once])
        np.maximum.at(high_rate, bundle, np.maximum.reduceat(rate, first)[once])
        cables = add_into(count, bundle,
                          np.add.reduceat(links["cables"].to_numpy(), first)[once])
    has_medium = np.zeros((count, len(medium.cat.categories)), bool)
    has_medium[bundle, runs.medium[once]] = True
    capacity = sequential_sums(links["capacity_Bps"].to_numpy(),
                               np.where(runs.once, bundle_of_run, count), runs.bounds, count)
    return _LinkSums(runs, keys, bundle_of_run, add_into(count, bundle, runs.lengths[once]),
                     cables, capacity, low_rate, high_rate, has_medium)


def _bundles(fabric: Fabric, sums: _LinkSums,
             utilization: np.ndarray | None) -> tuple[Bundle, ...]:
    """The bundles: the fabric's sums with this call's failed cables and loads."""
    links = fabric.links
    runs, count, bundle_of_run = sums.runs, len(sums.keys), sums.bundle_of_run
    failed_cables = np.zeros(count, np.int64)
    failed = links["failed"].to_numpy()
    if failed.any():
        rows = np.flatnonzero(failed)
        run = runs.run_of(rows)
        keep = runs.once[run]
        failed_cables = add_into(count, bundle_of_run[run[keep]],
                                 links["cables"].to_numpy()[rows[keep]])
    peak = mean = np.full(count, np.nan)
    if utilization is not None:  # over every row, both directions
        peak = np.zeros(count + 1)
        if len(bundle_of_run):
            np.maximum.at(peak, bundle_of_run,
                          np.maximum.reduceat(utilization, runs.bounds[:-1]))
        rows_of = add_into(count + 1, bundle_of_run, runs.lengths)[:count]
        peak = peak[:count]
        mean = sequential_sums(utilization, bundle_of_run, runs.bounds, count) / np.maximum(
            rows_of, 1)
    tiers = list(links["tier"].cat.categories)
    media = list(links["medium"].cat.categories)
    out = []
    for b, key in enumerate(sums.keys.tolist()):
        pair, t = divmod(key, runs.tiers)
        lower, upper = divmod(pair, runs.boxes)
        present = np.flatnonzero(sums.has_medium[b])
        out.append(Bundle(
            lower=lower, upper=upper, tier=str(tiers[t]), cables=int(sums.cables[b]),
            links=int(sums.arcs[b]), rate_Bps=float(sums.low_rate_Bps[b]),
            max_rate_Bps=float(sums.high_rate_Bps[b]),
            capacity_Bps=float(sums.capacity_Bps[b]),
            medium=str(media[present[0]]) if len(present) == 1 else "mixed",
            media=tuple(str(media[m]) for m in present),
            failed_cables=int(failed_cables[b]), peak_utilization=float(peak[b]),
            mean_utilization=float(mean[b])))
    return tuple(out)


def _node_rows(fabric: Fabric) -> np.ndarray:
    """Row of every node in :data:`DRAWING_ROWS`, bottom up (unknown tiers go to the top)."""
    column = fabric.nodes["tier"]
    per_category = np.array([DRAWING_ROWS.index(c) if c in DRAWING_ROWS
                             else len(DRAWING_ROWS) - 1
                             for c in column.cat.categories], dtype=np.int64)
    return per_category[column.cat.codes.to_numpy()]


@ignores_failures
def _full_view(fabric: Fabric) -> _View:
    """One box per node; a row's nodes sorted by the mean position of their lower
    neighbours, so links run as straight up as the wiring allows."""
    rows = _node_rows(fabric)
    count = len(fabric.node_arrays)
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    present = [r for r in range(len(DRAWING_ROWS)) if (rows == r).any()]
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
    planes = fabric.node_arrays["plane"]
    boxes = tuple(Box(row=int(rows[i]), x=float(x[i]), width=float(width[i]), nodes=1,
                      models=(str(models[i]),), planes=int(planes[i] >= 0),
                      label=str(names[i])) for i in range(count))
    node_box = np.arange(count)
    node_box.setflags(write=False)
    return _View(boxes, node_box, (), "", float(slots), _link_sums(fabric, node_box, count))


def _clear_passing_links(width: np.ndarray, x: np.ndarray, rows: np.ndarray, src: np.ndarray,
                         dst: np.ndarray) -> None:
    """Narrow the boxes of rows that links pass on their way up (accelerator to NIC past
    the scale-up switches) so the links run between boxes, not through them."""
    level = np.cumsum(np.bincount(rows, minlength=len(DRAWING_ROWS)) > 0) - 1  # drawn row
    lower = np.where(rows[src] <= rows[dst], src, dst)
    upper = np.where(rows[src] <= rows[dst], dst, src)
    skip = level[rows[upper]] - level[rows[lower]] > 1
    for r in distinct(rows):
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


# bits of a node's end code: its row (times _ROW), and three flags
_LEAF, _NIC, _SYSTEM, _ROW = 1, 2, 4, 8


@dataclass(frozen=True, eq=False)
class _EndRuns:
    """The link rows as runs of one pair of end codes (row and flags of each end)."""

    bounds: np.ndarray
    src_code: np.ndarray  # per run
    dst_code: np.ndarray

    @classmethod
    def of(cls, fabric: Fabric, rows: np.ndarray) -> _EndRuns:
        nodes, links = fabric.nodes, fabric.links
        code = rows.astype(np.int8) * np.int8(_ROW)
        code += np.where(nodes["system"].to_numpy() >= 0, _SYSTEM, 0).astype(np.int8)
        code += np.where(fabric.kind_mask("nic"), _NIC, 0).astype(np.int8)
        code += np.where(Coded(nodes["tier"]).equals("leaf"), _LEAF, 0).astype(np.int8)
        src_code = code[links["src"].to_numpy()]
        dst_code = code[links["dst"].to_numpy()]
        bounds = run_starts((src_code, dst_code))
        return cls(bounds, src_code[bounds[:-1]].astype(np.int64),
                   dst_code[bounds[:-1]].astype(np.int64))

    def rows_where(self, selected: np.ndarray) -> np.ndarray:
        """The link rows of the runs ``selected`` (a bool per run), in row order."""
        return run_rows(self.bounds[:-1][selected], self.bounds[1:][selected])


@ignores_failures
def _aggregate_view(fabric: Fabric, max_columns: int) -> _View:
    """One box per tier and run of columns.

    A node with a system (accelerator, in-system switch chip, NIC) sits in its system's
    column; a switch covers the columns of the nodes below it; overlapping runs of one
    row merge so boxes never overlap.
    """
    nodes = fabric.nodes
    rows = _node_rows(fabric)
    ends = _EndRuns.of(fabric, rows)
    column_of_system, columns, grouping = _columns(fabric, ends, max_columns)
    n_columns = len(columns)
    count = len(nodes)
    system = nodes["system"].to_numpy()
    has_system = system >= 0
    first = np.full(count, n_columns, np.int64)
    last = np.full(count, -1, np.int64)
    first[has_system] = last[has_system] = column_of_system[system[has_system]]
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    row_src, row_dst = ends.src_code // _ROW, ends.dst_code // _ROW
    climbs = (row_dst < row_src) & (ends.src_code & _SYSTEM == 0)
    for r in range(len(DRAWING_ROWS)):  # bottom up: the rows below are final
        for part in segments(ends.bounds, climbs & (row_src == r)):
            np.minimum.at(first, src[part], first[dst[part]])
            np.maximum.at(last, src[part], last[dst[part]])
    alone = last < 0  # nothing below it: spread over every column
    first[alone], last[alone] = 0, n_columns - 1
    node_box = np.empty(count, np.int64)
    runs: list[tuple[int, int, int]] = []
    for r in range(len(DRAWING_ROWS)):
        members = np.flatnonzero(rows == r)
        if not len(members):
            continue
        merged: list[list[int]] = []
        spans = distinct(first[members] * (n_columns + 1) + last[members])
        for lo, hi in zip(*np.divmod(spans, n_columns + 1), strict=True):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        starts = np.array([m[0] for m in merged])
        node_box[members] = len(runs) + np.searchsorted(starts, first[members], "right") - 1
        runs += [(r, lo, hi) for lo, hi in merged]
    node_box.setflags(write=False)
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
    return _View(tuple(boxes), node_box, columns, grouping, float(n_columns),
                 _link_sums(fabric, node_box, len(boxes)))


def _columns(fabric: Fabric, ends: _EndRuns, max_columns: int
             ) -> tuple[np.ndarray, tuple[str, ...], str]:
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
    n_domains = len(distinct(domain))
    per_system = n_domains == n_systems
    candidates = [("system", "systems", domain) if per_system else
                  ("domain", "domains", domain)]
    to_leaf = ends.rows_where((ends.src_code & _NIC != 0) & (ends.dst_code & _LEAF != 0))
    src, dst = links["src"].to_numpy()[to_leaf], links["dst"].to_numpy()[to_leaf]
    for name, plural in (("unit", "units"), ("pod", "pods")):
        if len(to_leaf):
            values = np.full(n_systems, -1, np.int64)
            values[system[src]] = nodes[name].to_numpy()[dst]
            candidates.append((name, plural, values))
    valid = []
    for name, plural, values in candidates:
        groups = len(distinct(values))
        pairs = domain.astype(np.int64) * (int(values.max()) + 2) + (values + 1)
        if len(distinct(pairs)) == n_domains:  # every domain in one group
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


BOX_WIDTH = 0.76  # aggregated box width, in columns


FULL_BOX_SHARE = 0.82  # full view: box width / spacing of its row's nodes


FULL_BOX_MAX = 2.5  # full view: widest box, in node slots (a lone core switch)


PASSING_CLEARANCE = 0.2  # full view: room kept between a passing link and a box, in slots
