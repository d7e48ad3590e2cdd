"""The network parts a job's traffic can cross: the switches outside its systems and the
cabled links above its accelerators, grouped by model, tier and whether each is a single
point of failure.

Read from the link table's columns as integer codes over millions of rows: every
per-row fact is found in one pass (the levels of a row's ends, whether it goes up), the
footprint climbs the upward rows one source level at a time (each row read once), and
what only a few parts need (the uplinks that share a switch's load) is looked up for
those parts alone. :func:`network_parts` is the one entry point;
:func:`topomodel.analysis.reliability.goodput.component_lines` turns its parts into failure-rate
lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from topomodel.arrays import distinct
from topomodel.fabric.columns import Coded, CodeLabels
from topomodel.inputs.parts import Optic, ScaleupSwitch
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
    """The live upward link rows of a fabric (the lower end's level below the upper's),
    with their ends and cables, grouped by source level as segments of a view.

    The view is the link table itself when nothing has failed and its rows fall into at
    most :data:`RUNS_MAX` runs of one (source level, destination level) (a builder
    writes each bundle's two directions as two blocks): the segments are the upward
    runs, slices of the table's own columns, and nothing is copied. Otherwise the view
    is the upward rows picked out (``rows``, in row order). Positions in the view are
    in row order either way.
    """

    def __init__(self, fabric: Fabric, level: np.ndarray) -> None:
        links = fabric.links
        self.node_count = len(fabric.node_arrays)
        src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
        cables = links["cables"].to_numpy()
        failed = links["failed"].to_numpy()
        self.level = level
        level_src, level_dst = level[src], level[dst]
        runs = None if failed.any() else _upward_runs(level_src, level_dst)
        self.rows: np.ndarray | None = None  # view position -> link row (None: the same)
        self.by_level: Sequence[Sequence[slice | np.ndarray]]
        # the level each segment's rows go into, where it is one (a run's)
        self.into: list[int | None]
        if runs is not None:
            self.src, self.dst, self.cables = src, dst, cables
            self.by_level = [[at for at, _ in of_level] for of_level in runs]
            self.into = [into for of_level in runs for _, into in of_level]
        else:
            self.rows = np.flatnonzero((level_src < level_dst) & ~failed)
            self.src, self.dst = src[self.rows], dst[self.rows]
            self.cables = cables[self.rows]
            self.by_level = _segments_by_level(level_src[self.rows])
            self.into = [None for of_level in self.by_level for _ in of_level]
        self.size = len(self.src)
        self.segments = [at for segments in self.by_level for at in segments]
        self.out_of_level: list[int] = [
            LEVELS[k] for k, of_level in enumerate(self.by_level) for _ in range(len(of_level))]
        # peer rows (a torus: both ends on one level), few or none
        self.side = np.flatnonzero((level_src == level_dst) & ~failed)

    def column(self, values: np.ndarray) -> np.ndarray:
        """A link column's values at the view's positions."""
        return values if self.rows is None else values[self.rows]

    def where(self, keep: Callable[[slice | np.ndarray], np.ndarray], *,
              out_of: np.ndarray | None = None, into: np.ndarray | None = None
              ) -> np.ndarray:
        """The upward positions where ``keep(segment)`` (one bool per position of the
        segment) holds, level by level; only rows out of nodes of the ``out_of`` nodes'
        levels, or into the ``into`` nodes' levels, are looked at when given."""
        sources = None if out_of is None else set(distinct(self.level[out_of]).tolist())
        targets = None if into is None else set(distinct(self.level[into]).tolist())
        found = [_kept(at, keep(at)) for at, lower, upper in zip(
                     self.segments, self.out_of_level, self.into, strict=True)
                 if (sources is None or lower in sources)
                 and (targets is None or upper is None or upper in targets)]
        return np.concatenate(found) if found else np.empty(0, np.int64)

    def climb(self, start: np.ndarray) -> np.ndarray:
        """Per node: ``start`` or reached from a ``start`` node over upward rows (every
        row's source level is below its destination's, so one pass per level, lowest
        first, sees each source final)."""
        reached = start.copy()
        for at in self.segments:
            src, dst = self.src[at], self.dst[at]
            reached[dst[reached[src]]] = True
        return reached

    def out_of(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per node of ``nodes``: its upward rows' cables, summed, and how many rows
        (one pass over the upward rows for all of them)."""
        wanted = np.zeros(self.node_count, bool)
        wanted[nodes] = True
        at = self.where(lambda seg: wanted[self.src[seg]], out_of=nodes)
        src = self.src[at]
        cables = np.bincount(src, weights=self.cables[at], minlength=self.node_count)
        rows = np.bincount(src, minlength=self.node_count)
        return cables[nodes], rows[nodes]

    def last_below(self, nodes: np.ndarray, footprint: np.ndarray) -> np.ndarray:
        """Per node of ``nodes``: the source of the last upward row in row order that
        comes into it from a ``footprint`` node, else -1."""
        wanted = np.zeros(self.node_count, bool)
        wanted[nodes] = True
        at = np.sort(self.where(lambda seg: wanted[self.dst[seg]], into=nodes))
        at = at[footprint[self.src[at]]]
        below = np.full(self.node_count, -1)
        below[self.dst[at]] = self.src[at]  # the last row into each node wins
        return below[nodes]


RUNS_MAX = 4096
"""Most runs (of one source level, or of one pair of end levels) walked as slices: a
builder writes a bundle's rows as blocks, 688 runs at the 98k 4K-supernode example;
with more, the upward rows or each level's are picked out by one search instead."""


def _upward_runs(level_src: np.ndarray, level_dst: np.ndarray
                 ) -> list[list[tuple[slice, int]]] | None:
    """Per level of :data:`LEVELS`, the runs of link rows that go up from it, as
    slices with the level they go into; None when the rows change end levels more than
    :data:`RUNS_MAX` times."""
    pair = level_src * np.int8(len(LEVELS) + 1)  # levels are 0..4: an int8 pair code
    pair += level_dst
    starts = np.flatnonzero(pair[1:] != pair[:-1]) + 1
    if len(starts) >= RUNS_MAX:
        return None
    runs: list[list[tuple[slice, int]]] = [[] for _ in LEVELS]
    for start, stop in pairwise([0, *starts.tolist(), len(pair)]):
        if stop > start and level_src[start] < level_dst[start]:
            runs[LEVELS.index(int(level_src[start]))].append(
                (slice(start, stop), int(level_dst[start])))
    return runs


def _segments_by_level(level: np.ndarray) -> list[list[slice]] | list[list[np.ndarray]]:
    """Per level of :data:`LEVELS`, the positions of ``level`` holding it: as slices of
    its runs when they are at most :data:`RUNS_MAX`, else as one index array."""
    starts = np.flatnonzero(level[1:] != level[:-1]) + 1
    if len(starts) >= RUNS_MAX:
        return [[np.flatnonzero(level == lv)] for lv in LEVELS]
    runs: list[list[slice]] = [[] for _ in LEVELS]
    for start, stop in pairwise([0, *starts.tolist(), len(level)]):
        if stop > start:
            runs[LEVELS.index(int(level[start]))].append(slice(start, stop))
    return runs


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
    lone_cable = np.zeros(upward.size, bool)  # the one uplink cable of such a node
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
    # the upward ones masked where they are in the view (no copy of millions of rows)
    side = upward.side
    peer = side[(src[side] < dst[side]) & needed[src[side]] & needed[dst[side]]]
    peer = peer[crossed[peer]]
    counted = np.zeros(upward.size, bool)
    crossed_up = upward.column(crossed)
    for at in upward.segments:
        counted[at] = needed[upward.src[at]] & crossed_up[at]
    in_system = system >= 0
    # both ends in one system: looked at only where the upper end is in one
    inside = upward.where(lambda at: counted[at], into=np.flatnonzero(in_system))
    inside = inside[in_system[upward.dst[inside]]]
    single_up = lone_cable.copy()
    single_up[inside] |= system[upward.src[inside]] == system[upward.dst[inside]]
    peer_src, peer_dst = src[peer], dst[peer]
    single_peer = (system[peer_src] >= 0) & (system[peer_src] == system[peer_dst])
    groups: dict[tuple[str, str, bool], tuple[int, int, bool]] = {}
    for rows, single_rows, weight, keep, goes_up in (
            (upward.rows, single_up, upward.cables, counted, True),
            (peer, single_peer, cables[peer], None, False)):
        for key, (count, first) in _grouped(rows, optic, tier, single_rows, weight,
                                            counted=keep).items():
            known_count, known_first, known_up = groups.get(key, (0, first, goes_up))
            groups[key] = (known_count + count, *min((known_first, known_up), (first, goes_up)))
    ordered = sorted(groups.items())
    firsts = np.array([first for _, (_, first, _) in ordered], np.int64)
    # a link's load is shared by its lower end's other uplinks (or other peer links)
    up_cables, _ = upward.out_of(src[firsts])
    side_src, side_cables = src[side], cables[side]
    parts = []
    for ((optic_id, tier_label, single), (count, first, is_up)), ups, lower in zip(
            ordered, up_cables, src[firsts], strict=True):
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


def _grouped(rows: np.ndarray | None, model: CodeLabels, tier: CodeLabels,
             single: np.ndarray, weight: np.ndarray, *, counted: np.ndarray | None = None
             ) -> dict[tuple[str, str, bool], tuple[int, int]]:
    """(model, tier, single) -> (summed weight, first of ``rows`` in their order) over
    ``rows`` (None: every row of the columns; ``single``, ``weight`` and the mask
    ``counted``, default all, given per row of ``rows``), in label order: one small
    integer key per row, then per key present one comparison (a handful of keys over
    millions of rows: no sort, no bincount)."""
    tiers = max(len(tier.labels), 1)
    key_count = max(len(model.labels), 1) * tiers * 2
    dtype = next(t for t in (np.int8, np.int16, np.int64) if 2 * key_count < np.iinfo(t).max)
    keys = (model.codes if rows is None else model.codes[rows]).astype(dtype)
    keys *= tiers
    keys += tier.codes if rows is None else tier.codes[rows]
    keys *= 2
    keys += single
    if counted is not None:  # rows not counted take the key past the last, branch-free
        keys -= key_count
        keys *= counted
        keys += key_count
    groups = []
    key = int(keys.min()) if len(keys) else key_count
    while key < key_count:
        of_key = keys == key
        first = int(np.argmax(of_key))
        groups.append(((model.label(key // 2 // tiers), tier.label(key // 2 % tiers),
                        bool(key % 2)),
                       (int(np.sum(weight, where=of_key)),
                        first if rows is None else int(rows[first]))))
        keys += of_key * dtype(key_count - key)  # done: past the last, then the next
        key = int(keys.min())
    return dict(sorted(groups, key=lambda group: group[0]))
