"""The built network: one node table and one link table, cheap at 100k+ accelerators.

Kinds, tiers and media are the words of :mod:`topomodel.vocabulary`.

The tables are numpy columns (:class:`~topomodel.fabric.columns.Columns`:
:attr:`Fabric.node_arrays`, :attr:`Fabric.link_arrays`; categorical columns as
:class:`~topomodel.fabric.columns.Category`), so building and routing a fabric imports
no pandas; :attr:`Fabric.nodes` and :attr:`Fabric.links` are the same tables as pandas
DataFrames, made on first use for the verbs that need pandas.

Node attributes (columns of :attr:`Fabric.node_arrays`, row index = node number):

============ ======================================================================
``name``     readable, sortable id (``sys0012/acc5``, ``p0/pod3/spine7``)
``kind``     ``accelerator``, ``nic``, ``scaleup_switch`` or ``switch`` (``NODE_KINDS``)
``tier``     ``accelerator``, ``nic``, ``scaleup`` (in-system switch chips),
             ``scaleup_l2``/``scaleup_l3`` (supernode levels), ``leaf``, ``spine``, ``core``
             (``NODE_TIERS``)
``model``    catalog id
``system``   system number (-1 for network switches)
``local``    index inside the system (accelerators, NICs, in-system switches), else -1
``domain``   scale-up domain number (-1 outside one)
``unit``     scalable unit (-1 where not applicable)
``pod``      pod of a 3-tier fabric, or supernode plane pod (-1 otherwise)
``plane``    scale-out or supernode plane (-1 otherwise)
``rail``     rail of a NIC (its index in the system), -1 otherwise
``latency_s`` switching latency of the node, seconds (0 for endpoints)
============ ======================================================================

Link attributes (:attr:`Fabric.link_arrays`): one row per direction.

================= =================================================================
``src``, ``dst``  node numbers
``tier``          ``scaleup``, ``scaleup_l2``, ``scaleup_l3``, ``host``, ``leaf``,
                  ``spine``, ``core`` (named after the upper end for scale-out;
                  ``LINK_TIERS``)
``cables``        parallel physical links merged into this arc
``rate_Bps``      one cable's rate, bytes/s per direction
``capacity_Bps``  ``cables * rate_Bps``
``length_m``      cable length, metres
``latency_s``     propagation delay, seconds
``medium``        ``electrical`` (board/backplane), ``copper``, ``mmf``, ``smf``, ``pcie``,
                  ``ocs``, ``optical`` (``MEDIA``)
``optic``         catalog id of the cable or module ('' for board traces and PCIe)
``failed``        True for a failed link (its capacity is kept for reference)
================= =================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from topomodel.fabric.columns import Category, Columns
from topomodel.fabric.columns import Coded as Coded
from topomodel.fabric.columns import labels as labels
from topomodel.fabric.columns import present_labels as present_labels
from topomodel.inputs.records import documented

# re-exported: the vocabulary's tiers and media are the link table's categories
from topomodel.vocabulary import LINK_TIERS as LINK_TIERS
from topomodel.vocabulary import MEDIA as MEDIA
from topomodel.vocabulary import SWITCH_TIERS as SWITCH_TIERS

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd

    from topomodel.fabric.structure import Injection, Structure
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

NODE_COLUMNS = ("name", "kind", "tier", "model", "system", "local", "domain", "unit", "pod",
                "plane", "rail", "latency_s")
LINK_COLUMNS = ("src", "dst", "tier", "cables", "rate_Bps", "capacity_Bps", "length_m",
                "latency_s", "medium", "optic", "failed")
PROPAGATION_S_PER_M = documented(
    "fabric.PROPAGATION_S_PER_M", 5e-9,
    "light in fibre or a signal in copper travels about 2e8 m/s: 5 ns per metre")


@dataclass
class FabricBuilder:
    """Accumulates node and link blocks as arrays; :meth:`node_columns`,
    :meth:`link_columns`, :meth:`cable_groups` and :meth:`reverse_rows` give the tables'
    columns, each made in one pass over its blocks (:func:`link_table` makes the link
    table of them)."""

    node_blocks: list[dict[str, Any]] = field(default_factory=list)
    link_blocks: list[dict[str, Any]] = field(default_factory=list)
    node_count: int = 0

    def add_nodes(self, names: list[str] | np.ndarray, *, kind: str, tier: str, model: str,
                  latency_s: float = 0.0, **address: Any) -> np.ndarray:
        """Add nodes; return their numbers. ``address`` holds arrays or scalars."""
        count = len(names)
        numbers = np.arange(self.node_count, self.node_count + count)
        block: dict[str, Any] = {"name": np.asarray(names, dtype=object), "kind": kind,
                                 "tier": tier, "model": model, "latency_s": latency_s,
                                 "count": count}
        for column in _ADDRESS_COLUMNS:
            block[column] = _per_row(address.pop(column, -1), count)
        if address:
            raise TypeError(f"unknown node attributes {sorted(address)}")
        self.node_blocks.append(block)
        self.node_count += count
        return numbers

    def add_links(self, src: np.ndarray, dst: np.ndarray, *, tier: str, rate_Bps: float,
                  cables: np.ndarray | int = 1,
                  medium: np.ndarray | str = "electrical") -> None:
        """Add bundles between ``src[i]`` and ``dst[i]``, both directions."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        n = len(src)
        cables_arr = _per_row(cables, n)
        if isinstance(medium, str):
            medium_codes: np.ndarray = np.asarray(MEDIA.index(medium), np.int8)
        else:
            medium_codes = label_codes(medium, MEDIA)
        for a, b in ((src, dst), (dst, src)):
            self.link_blocks.append({
                "src": a, "dst": b, "tier": LINK_TIERS.index(tier), "cables": cables_arr,
                "rate_Bps": float(rate_Bps), "medium": medium_codes, "count": n})

    def node_columns(self) -> dict[str, Any]:
        """The node table's columns (:data:`NODE_COLUMNS`), fresh arrays: ``kind``,
        ``tier`` and ``model`` categorical with the labels present, in sorted order."""
        blocks = self.node_blocks
        counts = _counts(blocks)
        columns: dict[str, Any] = {"name": _joined(blocks, "name", object)}
        for column in ("kind", "tier", "model"):
            present = sorted({b[column] for b in blocks})
            codes = np.repeat(np.array([present.index(b[column]) for b in blocks], np.int64),
                              counts)
            columns[column] = Category(codes, present)
        for column in _ADDRESS_COLUMNS:
            columns[column] = _joined(blocks, column, np.int64)
        columns["latency_s"] = np.repeat(
            np.array([b["latency_s"] for b in blocks], float), counts)
        return {column: columns[column] for column in NODE_COLUMNS}

    def link_columns(self) -> dict[str, Any]:
        """The link table's columns as built, before cabling: ``src``, ``dst``, ``tier``
        and ``medium`` (integer codes into :data:`LINK_TIERS` and :data:`MEDIA`),
        ``cables``, ``rate_Bps`` and ``capacity_Bps``; fresh arrays, one row per
        direction. ``src`` and ``dst`` are node numbers in :func:`index_dtype` of the
        node count, ``cables`` int32 where every count fits (int64 otherwise): 4 bytes
        a row each, not 8, on millions of rows; arithmetic on them that could pass
        2**31 (a key ``src * nodes + dst``) casts to int64 first."""
        blocks = self.link_blocks
        counts = _counts(blocks)
        node_index = index_dtype(int(_counts(self.node_blocks).sum()))
        cables = _joined(blocks, "cables", np.int64)
        if not len(cables) or int(cables.max()) <= np.iinfo(np.int32).max:
            cables = cables.astype(np.int32)  # a few per row; their products are floats
        rate = np.repeat(np.array([b["rate_Bps"] for b in blocks], float), counts)
        return {"src": _joined(blocks, "src", node_index),
                "dst": _joined(blocks, "dst", node_index),
                "tier": np.repeat(np.array([b["tier"] for b in blocks], np.int8), counts),
                "cables": cables, "rate_Bps": rate, "capacity_Bps": cables * rate,
                "medium": _joined(blocks, "medium", np.int8)}

    def cable_groups(self) -> tuple[np.ndarray, np.ndarray]:
        """Each link row's group of what its cable depends on, and the distinct link
        rates in ascending order (bytes/s): the group is :func:`cable_group` of the
        row's tier, rate and medium codes, made from the blocks (each of one tier and
        one rate) in one pass."""
        blocks = self.link_blocks
        block_rates = np.array([b["rate_Bps"] for b in blocks], float)
        rates = np.unique(block_rates)
        base = cable_group(np.array([b["tier"] for b in blocks], np.int64),
                           np.searchsorted(rates, block_rates), len(rates), 0)
        out = np.empty(sum(b["count"] for b in blocks), np.int64)
        start = 0
        for block, first in zip(blocks, base.tolist(), strict=True):
            stop = start + block["count"]
            out[start:stop] = block["medium"]
            out[start:stop] += first
            start = stop
        return out, rates

    def reverse_rows(self) -> np.ndarray:
        """Each link row's reverse row (the same cables the other way: :meth:`add_links`
        writes a bundle's two directions as two blocks of equal length, one after the
        other)."""
        counts = _counts(self.link_blocks).tolist()
        reverse = np.arange(sum(counts), dtype=index_dtype(sum(counts)))
        start = 0
        for block, count in enumerate(counts):  # the next block's row, or the previous'
            reverse[start:start + count] += count if block % 2 == 0 else -count
            start += count
        return reverse


_ADDRESS_COLUMNS = ("system", "local", "domain", "unit", "pod", "plane", "rail")
"""The node columns :meth:`FabricBuilder.add_nodes` takes as addresses (-1 if not given)."""


def index_dtype(count: int) -> type[np.signedinteger[Any]]:
    """The integer type of an index into ``count`` items (node numbers, link rows):
    int32 where every index and -1 fit (up to 2**31 - 1 items, some 300 times the
    link rows of a 131k-accelerator fabric), int64 beyond.

    Examples
    --------
    >>> index_dtype(6_500_000).__name__, index_dtype(2**31).__name__
    ('int32', 'int64')
    """
    return np.int32 if count <= np.iinfo(np.int32).max else np.int64


def _per_row(value: Any, count: int) -> np.ndarray:
    """``value`` as integers for ``count`` rows: one for all (a 0-d array) or one per
    row; anything else numpy broadcasts to ``count`` (or refuses)."""
    array = np.asarray(value, dtype=np.int64)
    if array.shape not in ((), (count,)):
        array = np.broadcast_to(array, (count,))
    return array


def cable_group(tier_codes: Any, rate_codes: Any, rates: int, medium_codes: Any) -> Any:
    """The group of link rows of one tier, rate and medium (codes into
    :data:`LINK_TIERS`, ``rates`` distinct rates and :data:`MEDIA`), numbered in tier,
    then rate, then medium order: what a cable choice depends on.

    Examples
    --------
    >>> int(cable_group(LINK_TIERS.index("leaf"), 1, 2, MEDIA.index("smf")))
    67
    """
    return (np.asarray(tier_codes) * rates + rate_codes) * len(MEDIA) + medium_codes


def _counts(blocks: list[dict[str, Any]]) -> np.ndarray:
    """The row count of each block."""
    return np.array([b["count"] for b in blocks], np.int64)


def _joined(blocks: list[dict[str, Any]], key: str, dtype: Any) -> np.ndarray:
    """The ``key`` values of ``blocks`` (an array of ``count`` values or one for the
    whole block) in one fresh array, written block by block."""
    out = np.empty(sum(b["count"] for b in blocks), dtype)
    start = 0
    for block in blocks:
        stop = start + block["count"]
        out[start:stop] = block[key]
        start = stop
    return out


def link_table(columns: dict[str, Any], *, length_m: np.ndarray | None = None,
               optic_codes: np.ndarray | None = None, optic_ids: Sequence[str] = ("",),
               failed: np.ndarray | None = None) -> Columns:
    """The link table (:data:`LINK_COLUMNS`) from :meth:`FabricBuilder.link_columns`'s
    arrays and the cabling: ``length_m`` (metres; 0 where not given), the optics'
    ``optic_codes`` into ``optic_ids`` ('' where not given) and ``failed`` (none where
    not given); ``latency_s`` is the length's propagation delay. The arrays become the
    table's columns as they are, not copied: the caller hands them over."""
    count = len(columns["src"])
    length = np.zeros(count) if length_m is None else length_m
    return Columns({
        "src": columns["src"], "dst": columns["dst"],
        "tier": Category(columns["tier"], LINK_TIERS), "cables": columns["cables"],
        "rate_Bps": columns["rate_Bps"], "capacity_Bps": columns["capacity_Bps"],
        "length_m": length, "latency_s": length * PROPAGATION_S_PER_M,
        "medium": Category(columns["medium"], MEDIA),
        "optic": Category(np.zeros(count, np.int8) if optic_codes is None
                          else optic_codes, optic_ids),
        "failed": np.zeros(count, bool) if failed is None else failed,
    })


def categorical(codes: np.ndarray, categories: Sequence[str]) -> Any:
    """A pandas categorical column from integer codes into ``categories``."""
    import pandas as pd

    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(list(categories)))


def scaled_rates(links: Columns, rows: np.ndarray, factor: float) -> Columns:
    """The link table with the ``rows`` (a boolean mask) at ``factor`` times their rate
    and capacity, the other columns shared."""
    return links.replaced(**{column: np.where(rows, links[column] * factor, links[column])
                             for column in ("capacity_Bps", "rate_Bps")})


def label_codes(values: Any, categories: Sequence[str]) -> np.ndarray:
    """Each of ``values`` (strings) as its index in ``categories`` (-1 where absent),
    int8: the codes a categorical of those categories would hold.

    Examples
    --------
    >>> label_codes(["smf", "copper", "smf", "air"], ("copper", "smf")).tolist()
    [1, 0, 1, -1]
    """
    present, inverse = np.unique(np.asarray(values, dtype=str), return_inverse=True)
    lookup = np.array([categories.index(v) if v in categories else -1
                       for v in present.tolist()] + [-1], np.int8)
    codes: np.ndarray = lookup[inverse.ravel()] if len(present) else np.empty(0, np.int8)
    return codes


def node_names(prefixes: np.ndarray | list[str], suffixes: np.ndarray | list[str]) -> np.ndarray:
    """Every prefix joined with every suffix, prefix-major: ``sys00/acc0, sys00/acc1, ...``.

    Examples
    --------
    >>> node_names(["s0/", "s1/"], ["a", "b"]).tolist()
    ['s0/a', 's0/b', 's1/a', 's1/b']
    """
    pre = np.asarray(prefixes, dtype=str)
    suf = np.asarray(suffixes, dtype=str)
    return np.strings.add(np.repeat(pre, len(suf)), np.tile(suf, len(pre))).astype(object)


def numbered(stem: str, count: int) -> list[str]:
    """``stem0 .. stem{count-1}`` zero-padded to sort: ``numbered('leaf', 12)[3] == 'leaf03'``."""
    width = len(str(max(count - 1, 1)))
    return [f"{stem}{i:0{width}d}" for i in range(count)]


@dataclass(frozen=True, eq=False)
class ClosTier:
    """How one switch tier of a Clos was sized (for reports and closed forms)."""

    name: str
    model: str
    switches: int
    down_ports: int  # per switch, as designed
    up_ports: int  # per switch
    down_rate_Bps: float
    up_rate_Bps: float
    oversubscription: float  # down:up bandwidth, as realised
    asked_oversubscription: float
    plane: int
    group: str  # '' for the scale-out fabric, 'rail3' for rail-only, 'plane2' for supernodes


@dataclass(frozen=True, eq=False)
class Fabric:
    """A built fabric: node and link tables plus how it was built.

    ``node_arrays`` and ``link_arrays`` are the tables as numpy columns;
    :attr:`nodes` and :attr:`links` the same as pandas DataFrames (made on first use:
    only the verbs that need pandas import it).

    ``structure`` records the builder's parameters (scale-up kind, torus shape, NICs,
    fat-tree tiers) so analyses can use closed forms and routing can use addresses;
    ``injection`` each accelerator's serving NIC and bandwidth into the network, decided
    once when the links are made; ``reverse_rows`` each link row's reverse row (the
    same cables the other way, as the builder wrote them); ``clos_tiers`` how each Clos
    tier was sized.
    """

    design: Design
    catalog: Catalog
    node_arrays: Columns
    link_arrays: Columns
    structure: Structure
    injection: Injection
    reverse_rows: np.ndarray
    clos_tiers: tuple[ClosTier, ...] = ()

    @cached_property
    def nodes(self) -> pd.DataFrame:
        """The node table as a pandas DataFrame (:meth:`Columns.frame
        <topomodel.fabric.columns.Columns.frame>` of :attr:`node_arrays`, made once)."""
        return self.node_arrays.frame()

    @cached_property
    def links(self) -> pd.DataFrame:
        """The link table as a pandas DataFrame (of :attr:`link_arrays`, made once)."""
        return self.link_arrays.frame()

    @property
    def accelerators(self) -> np.ndarray:
        """Node numbers of the accelerators, in rank order."""
        return np.flatnonzero(self.kind_mask("accelerator"))

    @property
    def accelerator_count(self) -> int:
        """How many accelerators."""
        return int(np.count_nonzero(self.kind_mask("accelerator")))

    def kind_mask(self, kind: str) -> np.ndarray:
        """Per node: whether its kind is ``kind`` (from the categorical codes, fast)."""
        return Coded(self.node_arrays["kind"]).equals(kind)

    def node_number(self, name: str) -> int:
        """Node number of ``name``; ``KeyError`` if there is none."""
        return int(self._index_by_name[name])

    def derived(self, make: Callable[..., T], *key: Hashable) -> T:
        """``make(self, *key)``, built on first use and kept with this fabric (the
        routers' views, link rates under one time model): a derived view lives and dies
        with its fabric. A view whose ``make`` is marked :func:`ignores_failures` is
        kept with every copy of this fabric that differs from it only by failed parts
        (:meth:`with_failed`), so a degraded copy does not build it again; one marked
        :func:`ignores_capacities`, with every copy that differs from it only by link
        rates (:meth:`with_capacities`): the routes of a traffic, routed once, are
        timed again at the new rates."""
        home = VIEW_HOMES[(getattr(make, _IGNORES_FAILURES, False),
                           getattr(make, _IGNORES_CAPACITIES, False))]
        views: dict[object, Any] = self.__dict__.setdefault(home, {})
        if (make, key) not in views:
            views[make, key] = make(self, *key)
        view: T = views[make, key]
        return view

    def with_failed(self, failed: np.ndarray) -> Fabric:
        """A copy of this fabric whose links' ``failed`` column is ``failed`` (one bool
        per link row). It shares every other column and the views of makers marked
        :func:`ignores_failures`, both ways: one built on either is there for the
        other."""
        copy = replace(self, link_arrays=self.link_arrays.replaced(failed=failed))
        for home in ("_failure_free", "_structural"):
            copy.__dict__[home] = self.__dict__.setdefault(home, {})
        return copy

    def with_capacities(self, rows: np.ndarray, factor: float) -> Fabric:
        """A copy of this fabric whose link ``rows`` (a boolean mask) carry ``factor``
        times their rate and capacity, its injection measured again. Nothing else
        differs: not the nodes, the wiring, the failed parts nor the cables (a what-if of
        bandwidth alone, as a claim search asks it). It shares the views of makers marked
        :func:`ignores_capacities` (routes, traffic, communicator keys) both ways."""
        from topomodel.fabric.structure import measure_injection

        links = scaled_rates(self.link_arrays, rows, factor)
        copy = replace(self, link_arrays=links, injection=measure_injection(
            self.node_arrays, links, self.structure, self.reverse_rows))
        for home in ("_capacity_free", "_structural"):
            copy.__dict__[home] = self.__dict__.setdefault(home, {})
        return copy

    def with_frames(self, *, nodes: pd.DataFrame | None = None,
                    links: pd.DataFrame | None = None) -> Fabric:
        """A copy of this fabric with other node or link tables given as pandas
        DataFrames (the same columns; a what-if that changes a column with pandas).
        Views derived from this fabric are not carried over."""
        return replace(
            self, node_arrays=self.node_arrays if nodes is None else Columns.of_frame(nodes),
            link_arrays=self.link_arrays if links is None else Columns.of_frame(links))

    @cached_property
    def _index_by_name(self) -> dict[str, int]:
        return {name: number for number, name in enumerate(self.node_arrays["name"].tolist())}

    @cached_property
    def graph(self) -> nx.DiGraph:
        """A networkx view: node = name, one arc per direction with the link attributes.

        Failed links are left out. Built on first use; keep it for small fabrics.
        """
        import networkx as nx

        graph = nx.DiGraph()
        nodes, links = self.node_arrays, self.link_arrays
        names = nodes["name"]
        node_attrs = {k: nodes[k].tolist() for k in NODE_COLUMNS if k != "name"}
        graph.add_nodes_from(
            (name, {k: v[i] for k, v in node_attrs.items()}) for i, name in enumerate(names))
        live = np.flatnonzero(~links["failed"])
        link_attrs = {k: links[k][live].tolist() for k in LINK_COLUMNS
                      if k not in ("src", "dst")}
        graph.add_edges_from(
            (names[u], names[v], {k: values[i] for k, values in link_attrs.items()})
            for i, (u, v) in enumerate(zip(links["src"][live], links["dst"][live],
                                           strict=True)))
        return graph


_IGNORES_FAILURES = "_topomodel_ignores_failures"


_IGNORES_CAPACITIES = "_topomodel_ignores_capacities"

VIEW_HOMES = {(False, False): "_derived", (True, False): "_failure_free",
              (False, True): "_capacity_free", (True, True): "_structural"}
"""Where :meth:`Fabric.derived` keeps a view, by whether its maker ignores failures and
whether it ignores capacities: each copy shares the homes its kind of difference leaves
valid (:meth:`Fabric.with_failed` the first two marked ``True``, :meth:`Fabric.with_capacities`
the last two)."""


def ignores_capacities(make: F) -> F:
    """Mark ``make``, a maker of a :meth:`Fabric.derived` view, as reading no link rate or
    capacity and nothing made from them (not the injection's bandwidths either; which
    NIC serves an accelerator it may read): its view is then shared by a fabric and its
    copies with other rates (:meth:`Fabric.with_capacities`). Routing reads the wiring,
    the cables and the failed parts, never a rate, so routes qualify. Returns ``make``."""
    setattr(make, _IGNORES_CAPACITIES, True)
    return make


def ignores_failures(make: F) -> F:
    """Mark ``make``, a maker of a :meth:`Fabric.derived` view, as reading nothing that
    failing a part changes (not the links' ``failed`` column, nor anything made from
    it): its view is then shared by a fabric and its copies with other failed parts
    (:meth:`Fabric.with_failed`). Returns ``make``."""
    setattr(make, _IGNORES_FAILURES, True)
    return make


@ignores_failures
def link_weaker_Bps(fabric: Fabric) -> np.ndarray:
    """:func:`weaker_direction_Bps` of every link row of ``fabric`` (failed ones too),
    bytes/s, read-only: found once per fabric with :meth:`Fabric.derived` (the tier
    table, the levels and every route report read it)."""
    weaker = weaker_direction_Bps(fabric.link_arrays, fabric.reverse_rows)
    weaker.setflags(write=False)
    return weaker


def weaker_direction_Bps(links: Any, reverse_rows: np.ndarray) -> np.ndarray:
    """Per link row, bytes/s: the smaller of its capacity and its reverse row's
    (``reverse_rows``, the same cables the other way). Links are one row per direction,
    and a design may give the two directions different rates
    (``scaleout.port_rate_up``/``port_rate_down``); a per-direction total of a tier is
    the sum of this over its rows, halved.

    Examples
    --------
    >>> rows = Columns({"capacity_Bps": np.array([5.0, 100.0, 7.0, 7.0])})
    >>> weaker_direction_Bps(rows, np.array([1, 0, 3, 2])).tolist()
    [5.0, 5.0, 7.0, 7.0]
    """
    cap = np.asarray(links["capacity_Bps"], dtype=float)
    return np.minimum(cap, cap[reverse_rows])
