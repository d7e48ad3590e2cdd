"""The network parts a job's traffic can cross: the switches outside its systems and the
cabled links above its accelerators, grouped by model, tier and whether each is a single
point of failure.

Read from the link table's columns as integer codes over millions of rows: every
per-row fact is found in one pass (the levels of a row's ends, whether it goes up), the
footprint climbs the upward rows one source level at a time (each row read once), and
what only a few parts need (the uplinks that share a switch's load) is looked up for
those parts alone. :func:`network_parts` is the one entry point;
:func:`topomodel.analysis.goodput.component_lines` turns its parts into failure-rate
lines.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from topomodel.catalog import Optic, ScaleupSwitch
from topomodel.fabric.columns import Coded, CodeLabels
from topomodel.vocabulary import FAT_TREE_TIERS, SCALEUP_TIERS

if TYPE_CHECKING:
    from topomodel.fabric.tables import Fabric


TIER_LEVEL = {"accelerator": 0, "nic": 1,
              **{tier: k + 1 for k, tier in enumerate(SCALEUP_TIERS)},
              **{tier: k + 2 for k, tier in enumerate(FAT_TREE_TIERS)}}
"""How far up the network a node tier sits; a part's uplinks go to a higher level
(accelerator 0; NIC and in-system switch chip 1; leaf 2, spine 3, core 4; supernode
levels beside the leaf and spine)."""

LEVELS = tuple(sorted(set(TIER_LEVEL.values())))
"""The levels, lowest first: the order in which the footprint climbs."""

MODULE_FORMS = ("transceiver", "lpo", "cpo")
"""Optic forms with a module at each end of a link; the others are one cable assembly."""


class NetworkPart(NamedTuple):
    """One kind of switch or cabled link in a job's footprint."""

    component: str  # a catalog failure-rate component: switch, scaleup_switch, optic
    model: str  # catalog id
    tier: str  # the switch tier, or "<link tier> link"
    quantity: int  # switches, or optic modules / cable assemblies
    single: bool  # a single point of failure
    keys: tuple[str, ...]  # more failure-rate keys (the optic form)
    representative: str  # a part to fail for the degradation run
    cables: int  # cables that failing it takes down
    parallel: int  # uplinks sharing its load


def node_levels(fabric: Fabric) -> np.ndarray:
    """Per node, its :data:`TIER_LEVEL` (int8), one look-up per tier code."""
    tier = fabric.nodes["tier"]
    per_code = np.array([TIER_LEVEL[t] for t in tier.cat.categories], np.int8)
    levels: np.ndarray = per_code[tier.cat.codes.to_numpy()]
    return levels


class _Upward:
    """The live upward link rows (the lower end's level below the upper's) of a fabric,
    in row order, with their ends, and their positions grouped by source level."""

    def __init__(self, fabric: Fabric, level: np.ndarray) -> None:
        links = fabric.links
        self.node_count = len(fabric.nodes)
        src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
        alive = ~links["failed"].to_numpy()
        level_src, level_dst = level[src], level[dst]
        self.rows = np.flatnonzero((level_src < level_dst) & alive)
        self.src, self.dst = src[self.rows], dst[self.rows]
        self.cables = links["cables"].to_numpy()[self.rows]
        self.by_level = _segments_by_level(level_src[self.rows])
        # peer rows (a torus: both ends on one level), few or none
        self.side = np.flatnonzero((level_src == level_dst) & alive)

    def climb(self, start: np.ndarray) -> np.ndarray:
        """Per node: ``start`` or reached from a ``start`` node over upward rows (every
        row's source level is below its destination's, so one pass per level, lowest
        first, sees each source final)."""
        reached = start.copy()
        for segments in self.by_level:
            for at in segments:
                src, dst = self.src[at], self.dst[at]
                reached[dst[reached[src]]] = True
        return reached

    def out_of(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per node of ``nodes``: its upward rows' cables, summed, and how many rows
        (one pass over the upward rows for all of them)."""
        node_count = self.node_count
        wanted = np.zeros(node_count, bool)
        wanted[nodes] = True
        at = np.flatnonzero(wanted[self.src])
        cables = np.bincount(self.src[at], weights=self.cables[at], minlength=node_count)
        rows = np.bincount(self.src[at], minlength=node_count)
        return cables[nodes], rows[nodes]

    def last_below(self, nodes: np.ndarray, footprint: np.ndarray) -> np.ndarray:
        """Per node of ``nodes``: the source of the last upward row in row order that
        comes into it from a ``footprint`` node, else -1."""
        node_count = self.node_count
        wanted = np.zeros(node_count, bool)
        wanted[nodes] = True
        at = np.flatnonzero(wanted[self.dst])
        at = at[footprint[self.src[at]]]
        below = np.full(node_count, -1)
        below[self.dst[at]] = self.src[at]  # the last row into each node wins
        return below[nodes]


RUNS_MAX = 4096
"""Most runs of one source level among the upward rows that are walked as slices of
the rows (a builder writes a bundle's rows as blocks, a few hundred of them at the 98k
4K-supernode example); more, and each level's rows are picked out by one search."""


def _segments_by_level(level: np.ndarray) -> list[list[slice] | list[np.ndarray]]:
    """Per level of :data:`LEVELS`, the positions of ``level`` holding it: as slices of
    its runs when they are at most :data:`RUNS_MAX`, else as one index array."""
    starts = np.flatnonzero(level[1:] != level[:-1]) + 1
    if len(starts) >= RUNS_MAX:
        return [[np.flatnonzero(level == lv)] for lv in LEVELS]
    bounds = [0, *starts.tolist(), len(level)]
    runs: list[list[slice]] = [[] for _ in LEVELS]
    for start, stop in pairwise(bounds):
        if stop > start:
            runs[LEVELS.index(int(level[start]))].append(slice(start, stop))
    return runs  # type: ignore[return-value]


def _kept(at: slice | np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The positions ``at`` (a slice or an index array) where ``keep`` (one per
    position) holds."""
    if isinstance(at, slice):
        return np.flatnonzero(keep) + (at.start or 0)
    kept: np.ndarray = at[keep]
    return kept


def network_parts(fabric: Fabric, in_job: np.ndarray) -> list[NetworkPart]:
    """Switches outside the systems and cabled links that the job's traffic can cross,
    ``in_job`` marking the nodes of the job's systems; switches first, then links, each
    in label order of (model, tier, single point)."""
    nodes, catalog = fabric.nodes, fabric.catalog
    node_count = len(nodes)
    upward = _Upward(fabric, node_levels(fabric))
    # climb: the switches above the job's parts carry its traffic
    needed = upward.climb(in_job)
    # Cut off from above, a NIC of the job stops it; so does any part that is the only
    # way up for such a part. A switch is a single point of failure when a part that must
    # not be cut off has all its uplinks to it (bottom up, level by level: a node's
    # uplinks are summed only if it must reach up).
    kind = Coded(nodes["kind"])
    must_reach = in_job & kind.equals("nic")
    lone_cable = np.zeros(len(upward.rows), bool)  # the one uplink cable of such a node
    for segments in upward.by_level:
        at = np.concatenate([_kept(seg, must_reach[upward.src[seg]]) for seg in segments]
                            or [np.empty(0, np.int64)])
        src, cables = upward.src[at], upward.cables[at]
        up_cables = np.bincount(src, weights=cables, minlength=node_count)[src]
        must_reach[upward.dst[at[cables == up_cables]]] = True
        lone_cable[at[up_cables == 1]] = True
    critical = must_reach & ~in_job
    system = nodes["system"].to_numpy()
    names = nodes["name"]
    switches = np.flatnonzero(needed & (system < 0) & (kind.equals("switch")
                                                       | kind.equals("scaleup_switch")))
    groups = _grouped(switches, CodeLabels(nodes["model"]), CodeLabels(nodes["tier"]),
                      critical[switches], np.ones(len(switches)))
    firsts = np.array([first for _, first in groups.values()], np.int64)
    parts: list[NetworkPart] = []
    for ((model, tier, single), (count, first)), parallel in zip(
            groups.items(), _alternatives(firsts, upward, needed), strict=True):
        part = "scaleup_switch" if isinstance(catalog.entries[model], ScaleupSwitch) else "switch"
        parts.append(NetworkPart(part, model, tier, count, single, (), str(names.iat[first]),
                                 1, parallel))
    return parts + _link_parts(fabric, upward, needed, lone_cable, system)


def _link_parts(fabric: Fabric, upward: _Upward, needed: np.ndarray, lone_cable: np.ndarray,
                system: np.ndarray) -> list[NetworkPart]:
    """The cabled links of the footprint: each physical link once (upward, or the
    lower-numbered end of a peer link). One is a single point of failure when it is the
    only uplink cable of a part that must not be cut off (``lone_cable``, per upward
    row), or when both ends sit in one system (cabled inside a rack)."""
    links, catalog, names = fabric.links, fabric.catalog, fabric.nodes["name"]
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    cables = links["cables"].to_numpy()
    optic, tier = CodeLabels(links["optic"]), CodeLabels(links["tier"])
    crossed = ~Coded(links["optic"]).equals("")  # with a cable or module: no trace
    # upward rows out of the footprint and peer rows inside it, with a cable or module:
    # the upward ones masked where they are (no copy of millions of rows)
    side = upward.side
    peer = side[(src[side] < dst[side]) & needed[src[side]] & needed[dst[side]]]
    peer = peer[crossed[peer]]
    counted = needed[upward.src]
    counted &= crossed[upward.rows]
    in_system = system >= 0
    groups: dict[tuple[str, str, bool], tuple[int, int]] = {}
    for rows, ends, lone, weight, keep in (
            (upward.rows, (upward.src, upward.dst), lone_cable, upward.cables, counted),
            (peer, (src[peer], dst[peer]), None, cables[peer], None)):
        single_rows = np.zeros(len(rows), bool) if lone is None else lone.copy()
        # both ends in one system: looked at only where the upper end is in one
        inside = np.flatnonzero(in_system[ends[1]] if keep is None
                                else in_system[ends[1]] & keep)
        single_rows[inside] |= system[ends[0][inside]] == system[ends[1][inside]]
        for key, (count, first) in _grouped(rows, optic, tier, single_rows, weight,
                                            counted=keep).items():
            known_count, known_first = groups.get(key, (0, first))
            groups[key] = (known_count + count, min(known_first, first))
    ordered = sorted(groups.items())
    firsts = np.array([first for _, (_, first) in ordered], np.int64)
    # a link's load is shared by its lower end's other uplinks (or other peer links)
    place = np.minimum(np.searchsorted(upward.rows, firsts), max(len(upward.rows) - 1, 0))
    goes_up = upward.rows[place] == firsts if len(upward.rows) else np.zeros(len(firsts), bool)
    up_cables, _ = upward.out_of(src[firsts])
    side_src, side_cables = src[side], cables[side]
    parts = []
    for ((optic_id, tier_label, single), (count, first)), is_up, ups, lower in zip(
            ordered, goes_up, up_cables, src[firsts], strict=True):
        form = catalog.get(optic_id, Optic).form
        per_link = 2 if form in MODULE_FORMS else 1
        sharing = ups if is_up else side_cables[side_src == lower].sum()
        parts.append(NetworkPart(
            "optic", optic_id, f"{tier_label} link", count * per_link, single, (form,),
            f"{names.iat[src[first]]} -- {names.iat[dst[first]]}", int(cables[first]),
            max(1, int(sharing))))
    return parts


def _alternatives(switches: np.ndarray, upward: _Upward, footprint: np.ndarray) -> list[int]:
    """Per switch of ``switches``, the switches that share its load: the uplinks of the
    first part below it with more than one (a spine with a single core uplink passes its
    load to its leaves, which spread it over their other spines). "Below" a node is the
    source of the last upward row from the ``footprint`` into it, in row order."""
    shared = [1] * len(switches)
    node = upward.last_below(switches, footprint)
    going = np.flatnonzero(node >= 0)
    while len(going):
        _, uplinks = upward.out_of(node[going])
        nxt = upward.last_below(node[going], footprint)
        down = (uplinks == 1) & (nxt >= 0)
        for k, count in zip(going[~down], uplinks[~down], strict=True):
            shared[int(k)] = max(1, int(count))
        node[going[down]] = nxt[down]
        going = going[down]
    return shared


def _grouped(rows: np.ndarray, model: CodeLabels, tier: CodeLabels, single: np.ndarray,
             weight: np.ndarray, *, counted: np.ndarray | None = None
             ) -> dict[tuple[str, str, bool], tuple[int, int]]:
    """(model, tier, single) -> (summed weight, first of ``rows`` in their order) over
    ``rows`` (``single``, ``weight`` and the mask ``counted``, default all, given per
    row of ``rows``), in label order: one small integer key per row, then per key
    present one comparison (a handful of keys over millions of rows: no sort, no
    bincount)."""
    tiers = max(len(tier.labels), 1)
    key_count = max(len(model.labels), 1) * tiers * 2
    dtype = np.int16 if key_count < np.iinfo(np.int16).max else np.int64
    keys = model.codes[rows].astype(dtype)
    keys *= tiers
    keys += tier.codes[rows]
    keys *= 2
    keys += single
    if counted is not None:
        keys[~counted] = key_count
    groups = []
    key = int(keys.min()) if len(keys) else key_count
    while key < key_count:
        of_key = keys == key
        groups.append(((model.label(key // 2 // tiers), tier.label(key // 2 % tiers),
                        bool(key % 2)),
                       (int(np.sum(weight, where=of_key)), int(rows[np.argmax(of_key)]))))
        key = int(np.min(keys, where=keys > key, initial=key_count))
    return dict(sorted(groups, key=lambda group: group[0]))
