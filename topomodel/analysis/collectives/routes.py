"""A traffic's routes on a fabric, kept with the fabric for every time model.

Routing reads the fabric (its links, failed ones included), the flows of each phase and
the routing options (:func:`route_key`), never the time model: tier efficiencies, hop
latencies, protocols and compute figures only turn the routed bytes into seconds. So a
traffic routed once on a fabric is timed again under another time model from the loads
kept here (:func:`phase_routes`), as the sensitivity's steps that move an efficiency
do. The one part of the time model that changes the flows, PXN, is applied once per
fabric and traffic too (:func:`pxn_traffic`), so its rewritten traffic, and the routes
kept for it, are the same objects every time.

Both views are kept with the fabric (:meth:`~topomodel.fabric.tables.Fabric.derived`,
not shared with its copies with other failed parts, whose routes differ) and weakly by
the traffic object: an entry lives as long as its traffic, which the step keeps
(:func:`~topomodel.analysis.training.stepshape.shared_traffic`), and the traffic itself, its
flows, sizes, groups and algorithm, is the rest of the key. Traffics are read-only once
built (routing and timing only read them), which is what makes the identity a key. A
traffic of other phases with the same flows (a ring all-gather and the reduce-scatter
of its groups) takes the routes kept for the first: routing reads nothing else. One
whose flows are the same with every flow's bytes a power of two times the kept
traffic's (a collective at 1 MiB, 64 MiB and 1 GiB) takes the kept routes with their
bytes scaled (:func:`flows_scale`, :meth:`PhaseRoute.scaled`): every router is oblivious
(no policy reads a load), so a link's bytes are sums of flows' bytes times shares of
paths, and multiplying every operand of a sum or product by a power of two multiplies
the rounded result by it exactly (IEEE 754 rounds relative to the exponent), while the
values stay in the normal range, as bytes do (from 2^-1022 to 2^1024).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_capacities
from topomodel.routing import route
from topomodel.routing.general import check_general_work
from topomodel.routing.routed import Routed
from topomodel.routing.structured import structured_supported
from topomodel.traffic.phases import AllPairsPhase, Phase, Traffic
from topomodel.traffic.pxn import pxn

if TYPE_CHECKING:
    from topomodel.analysis.collectives.linkrates import LinkRates

Rows = np.ndarray | slice
"""Link rows: an array of row numbers, or a ``slice`` of consecutive rows."""

TIME_BLOCK_ROWS = 1 << 16
"""Rows whose times :meth:`PhaseRoute.slowest` and the peak busy time compute at once:
512 KiB of float64, which stays in a core's cache, where one array over a phase's 5.7 M
rows (46 MB) would be fresh memory every time."""


@dataclass(frozen=True, eq=False)
class PhaseRoute:
    """One step of a phase as routed, kept in the smaller of two forms.

    Sparse: ``rows`` are the link rows whose bytes per step are not +0.0 (an array),
    ``row_bytes`` their bytes; ``loaded`` and ``loaded_bytes`` the rows among them with
    bytes (what the timing divides by the rates). Span: where at least half the rows
    of the router's span have bytes (a data-parallel all-reduce over a supernode loads
    5.7 M of its 6.5 M rows), ``rows`` and ``loaded`` are that span (a ``slice``) and
    ``row_bytes`` and ``loaded_bytes`` every row of it, +0.0 included: 8 bytes a row
    instead of 16, no scan for the rows with bytes and no gather of their rates. The
    rest of the :class:`~topomodel.routing.routed.Routed` (hops, unroutable flows,
    router, path classes) is kept as it is; :meth:`routed` gives it back, bit for bit,
    in either form."""

    links: int
    rows: Rows
    row_bytes: np.ndarray
    loaded: Rows
    loaded_bytes: np.ndarray
    hops: np.ndarray
    unroutable: np.ndarray
    router: str
    inside: np.ndarray | None

    @classmethod
    def of(cls, routed: Routed) -> PhaseRoute:
        """The smaller form of ``routed``: the span form where at least half of its
        span's rows have bytes and none is negative or NaN (which the sparse form
        leaves out of ``loaded``), else the sparse form."""
        dense = np.ascontiguousarray(routed.link_bytes)
        lo, hi = routed.span or (0, len(dense))  # +0.0 outside the span
        part = dense[lo:hi]
        rows: Rows
        loaded: Rows
        if 2 * np.count_nonzero(part) >= len(part) > 0 and part.min() >= 0:
            if 2 * len(part) < len(dense):  # not a view that holds every row
                part = part.copy()
            rows, row_bytes = slice(lo, hi), part
            loaded, loaded_bytes = rows, row_bytes
        else:
            # every row whose bit pattern is not +0.0 (a -0.0 or a NaN is kept as it is)
            found = np.flatnonzero(part.view(f"u{dense.itemsize}") != 0)  # a mask is faster
            row_bytes = part[found]
            if lo:
                found += lo
            positive = row_bytes > 0
            if positive.all():  # as routing gives them: the same arrays, held once
                rows = loaded = found
                loaded_bytes = row_bytes
            else:
                rows, loaded, loaded_bytes = found, found[positive], row_bytes[positive]
        made = cls(len(dense), rows, row_bytes, loaded, loaded_bytes,
                   routed.hops, routed.unroutable, routed.router, routed.inside)
        for array in (made.rows, made.row_bytes, made.loaded, made.loaded_bytes):
            if isinstance(array, np.ndarray):
                array.setflags(write=False)
        return made

    @property
    def has_loaded(self) -> bool:
        """Whether any row has bytes (the span form is made only where some do)."""
        return self.loaded_count > 0

    def loads_rows_of(self, other: PhaseRoute) -> bool:
        """Whether ``other``'s ``loaded`` rows are this one's (in the same form)."""
        mine, theirs = self.loaded, other.loaded
        if isinstance(mine, slice) or isinstance(theirs, slice):
            return isinstance(mine, slice) and isinstance(theirs, slice) and mine == theirs
        return np.array_equal(mine, theirs)

    def loaded_row(self, k: int) -> int:
        """The link row of the ``k``-th entry of ``loaded``."""
        if isinstance(self.loaded, slice):
            return int(self.loaded.start) + k
        return int(self.loaded[k])

    @property
    def loaded_count(self) -> int:
        """How many entries :attr:`loaded` has."""
        if isinstance(self.loaded, slice):
            return int(self.loaded.stop) - int(self.loaded.start)
        return len(self.loaded)

    def loaded_time_s(self, link_Bps: LinkRates, efficiency: float, start: int = 0,
                      stop: int | None = None) -> np.ndarray:
        """Per step, seconds on each row of :attr:`loaded` (its entries ``start`` to
        ``stop``): its bytes over its rate (``link_Bps``, bytes/s per link row) at
        ``efficiency``, in an array of its own. A row of the span form without bytes
        takes 0 s, on a failed link (rate 0) too; one with bytes on a failed link takes
        forever, as in the sparse form."""
        stop = self.loaded_count if stop is None else min(stop, self.loaded_count)
        dead = None
        if isinstance(self.loaded, slice):
            lo = int(self.loaded.start)
            link_time = link_Bps[lo + start:lo + stop] * efficiency
            dead = np.flatnonzero(link_time == 0)
        else:
            link_time = link_Bps[self.loaded[start:stop]]
            link_time *= efficiency
        loaded_bytes = self.loaded_bytes[start:stop]
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(loaded_bytes, link_time, out=link_time)
        if dead is not None and len(dead):  # 0 / 0 there: no bytes, no time
            link_time[dead] = np.where(loaded_bytes[dead] > 0, np.inf, 0.0)
        return link_time

    def slowest(self, link_Bps: LinkRates, efficiency: float) -> tuple[int, float]:
        """``(k, seconds)``: the first entry of :attr:`loaded` whose time per step
        (:meth:`loaded_time_s`) is the longest, and that time; ``(-1, 0.0)`` for none.
        The argmax of every entry's time, found :data:`TIME_BLOCK_ROWS` entries at a
        time: no array of millions of times to make and fill."""
        best_k, best = -1, 0.0
        for start in range(0, self.loaded_count, TIME_BLOCK_ROWS):
            times = self.loaded_time_s(link_Bps, efficiency, start, start + TIME_BLOCK_ROWS)
            k = int(np.argmax(times))
            if best_k < 0 or times[k] > best:  # a later block's equal time is not first
                best_k, best = start + k, float(times[k])
        return best_k, best

    def scaled(self, factor: float) -> PhaseRoute:
        """The same routes with every row's bytes times ``factor`` (a power of two: bit
        for bit what routing the flows with their bytes times ``factor`` gives, module
        docstring); the same rows, hops and router."""
        row_bytes = self.row_bytes * factor
        loaded_bytes = row_bytes if self.loaded_bytes is self.row_bytes else (
            self.loaded_bytes * factor)
        for array in (row_bytes, loaded_bytes):
            array.setflags(write=False)
        return PhaseRoute(self.links, self.rows, row_bytes, self.loaded, loaded_bytes,
                          self.hops, self.unroutable, self.router, self.inside)

    def link_bytes(self) -> np.ndarray:
        """Bytes per step on every link row, as the router gave them (a new array)."""
        dense = np.zeros(self.links, dtype=self.row_bytes.dtype)
        dense[self.rows] = self.row_bytes
        return dense

    def routed(self) -> Routed:
        """The :class:`~topomodel.routing.routed.Routed` this was made from (equal bit
        for bit; a new dense ``link_bytes``)."""
        return Routed(self.link_bytes(), self.hops, self.unroutable, self.router,
                      self.inside)


SCALED_BYTES_RANGE = (2.0**-500, 2.0**500)
"""Flow bytes (the smallest and largest not zero, of both traffics) within which routes
are scaled by a power of two rather than routed again (:func:`flows_scale`): a router
multiplies bytes by path shares and sums up to millions of them, so with bytes in this
range every product and sum stays in float64's normal range (2^-1022 to 2^1024), where
scaling by a power of two is exact; real bytes (1 to 2^40) are far inside."""


RouteKey = tuple[Any, ...]
"""What routing a traffic depends on besides the fabric and the traffic itself."""


def route_key(*, routing: str, seed: int, router: str, qps: int) -> RouteKey:
    """The routing options a traffic's routes depend on: the policy, the hash seed, the
    router (structured or general: the same loads, summed in another order) and the
    queue pairs per flow of hash routing. Options that do not apply to the policy (the
    seed and queue pairs under even ECMP) are kept all the same: a key that says too
    much costs a route, one that says too little gives a wrong one."""
    return (routing, seed, router, qps)


@ignores_capacities  # routing reads no rate (module docstring)
def kept_routes(_: Fabric) -> weakref.WeakKeyDictionary[Traffic, dict[RouteKey, Any]]:
    """The routes :func:`phase_routes` keeps on a fabric (with
    :meth:`~topomodel.fabric.tables.Fabric.derived`): per traffic, weakly, per
    :func:`route_key`, the phases' :class:`PhaseRoute`. Cleared, the next timing of a
    traffic routes it again (benchmarks that time routing clear it)."""
    return weakref.WeakKeyDictionary()


@ignores_capacities
def _pxn_memo(_: Fabric) -> weakref.WeakKeyDictionary[Traffic, Traffic | None]:
    return weakref.WeakKeyDictionary()


def pxn_traffic(fabric: Fabric, traffic: Traffic) -> Traffic:
    """:func:`~topomodel.traffic.pxn.pxn` of ``traffic`` on ``fabric``, rewritten once
    per fabric and traffic (the same object for every call while ``traffic`` lives)."""
    memo = fabric.derived(_pxn_memo)
    if traffic in memo:
        moved = memo[traffic]
        return traffic if moved is None else moved
    moved = pxn(fabric, traffic)
    # the traffic itself is never a value: a weak key its own value holds would not die
    memo[traffic] = None if moved is traffic else moved
    return moved


def phase_routes(fabric: Fabric, traffic: Traffic, *, routing: str, seed: int,
                 router: str, qps: int) -> tuple[PhaseRoute, ...]:
    """Every phase of ``traffic`` routed on ``fabric`` (one step each,
    :func:`~topomodel.routing.route`), routed once per fabric, traffic and
    :func:`route_key` and kept while the traffic lives; a traffic with the flows of one
    whose routes are kept (:func:`same_flows`) takes those.

    Raises
    ------
    RoutingError
        As :func:`~topomodel.routing.route` (and, before any phase is routed, when the
        general router's work would exceed its limit): nothing is kept then.
    """
    memo = fabric.derived(kept_routes)
    key = route_key(routing=routing, seed=seed, router=router, qps=qps)
    kept = memo.get(traffic)
    if kept is not None and key in kept:
        routes: tuple[PhaseRoute, ...] = kept[key]
        return routes
    alike = fabric.derived(kept_by_flows).setdefault(flows_print(traffic), {})
    for ref in list(alike):  # in the order they were kept, as ``memo`` holds them
        other = ref()
        held = memo.get(other) if other is not None else None
        if other is None or held is None or key not in held:
            continue
        scales = flows_scale(other, traffic)
        if scales is not None:  # a ring all-gather's routes are its reduce-scatter's
            twin = held[key]
            if any(f != 1.0 for f in scales):  # the same collective at another size
                twin = tuple(r if f == 1.0 else r.scaled(f)
                             for r, f in zip(twin, scales, strict=True))
            _keep(memo, alike, traffic)[key] = twin
            return twin
    if router == "general" or (router == "auto" and structured_supported(fabric)):
        check_general_work(fabric, traffic.phases, routing=routing, qps=qps)  # up front
    routes = tuple(PhaseRoute.of(route(fabric, ph, routing=routing, seed=seed,
                                       router=router, qps=qps))
                   for ph in traffic.phases)
    _keep(memo, alike, traffic)[key] = routes
    return routes


def _keep(memo: weakref.WeakKeyDictionary[Traffic, dict[RouteKey, Any]],
          alike: dict[weakref.ref[Traffic], None], traffic: Traffic
          ) -> dict[RouteKey, Any]:
    """``traffic``'s routes in ``memo``, entered (last) in ``alike`` when it enters
    ``memo``, so ``alike`` lists the kept traffics in ``memo``'s order; the entries of
    traffics no longer kept go."""
    held = memo.get(traffic)
    if held is None:
        for ref in [r for r in alike if r() is None or r() not in memo]:
            del alike[ref]
        ref = weakref.ref(traffic)
        alike.pop(ref, None)  # equal refs of one live object: the same entry
        alike[ref] = None
        held = memo[traffic] = {}
    return held


FlowsPrint = tuple[Any, ...]
"""What :func:`flows_print` gives: equal for two traffics :func:`flows_scale` matches."""


def flows_print(traffic: Traffic) -> FlowsPrint:
    """A few values of each phase's flows that :func:`flows_scale` requires equal of two
    traffics it matches (the flow count and the first and last flows' ends; of an
    all-pairs phase, its groups' first and last ranks and whether it is rewritten): the
    traffics kept under another print need not be compared (:func:`phase_routes`),
    those under the same one still are, in full. Reads no listed pairs."""
    out: list[Any] = []
    for ph in traffic.phases:
        if isinstance(ph, AllPairsPhase):
            out.append(("pairs", ph.flows, ph.rewrite is None, tuple(
                (b.ranks.shape, int(b.ranks.flat[0]), int(b.ranks.flat[-1]))
                if b.ranks.size else b.ranks.shape for b in ph.blocks)))
        else:
            ends = (ph.src[:2].tolist(), ph.dst[:2].tolist(), ph.src[-2:].tolist(),
                    ph.dst[-2:].tolist()) if ph.flows else ()
            out.append(("flows", ph.flows, *map(tuple, ends)))
    return tuple(out)


@ignores_capacities  # as kept_routes: shared by the same fabrics
def kept_by_flows(_: Fabric) -> dict[FlowsPrint, dict[weakref.ref[Traffic], None]]:
    """The traffics :func:`phase_routes` keeps routes of on a fabric, by their
    :func:`flows_print`, each print's in the order they were kept (weakly)."""
    return {}


def same_flows(a: Traffic, b: Traffic) -> bool:
    """Whether every phase of ``a`` has the flows of ``b``'s (ends and bytes per step,
    in order): all that routing reads of a traffic, so the two are routed alike (a ring
    all-gather and the reduce-scatter on its groups, as a step's tensor parallelism
    runs them). All-pairs phases, whose pairs are listed only where routed, match only
    themselves and phases of the same groups (:func:`flows_scale`)."""
    scales = flows_scale(a, b)
    return scales is not None and all(f == 1.0 for f in scales)


def flows_scale(a: Traffic, b: Traffic) -> tuple[float, ...] | None:
    """Per phase, the power of two by which ``b``'s phase has the bytes of ``a``'s on
    the same flows (ends in order; every flow's bytes that factor times ``a``'s, bit for
    bit: 1.0 where equal), or None where a phase's flows differ otherwise. All-pairs
    phases of the same groups compare their bytes per pair without listing them; those
    PXN rewrote compare their listed flows, where ``a``'s are listed (it was routed
    pair by pair), and match only themselves otherwise.

    Examples
    --------
    >>> from topomodel.traffic.phases import phase
    >>> a = Traffic((phase([0, 1], [1, 0], [3.0, 0.5]),))
    >>> b = Traffic((phase([0, 1], [1, 0], [192.0, 32.0]),))
    >>> c = Traffic((phase([0, 1], [1, 0], [6.0, 1.5]),))
    >>> flows_scale(a, b), flows_scale(b, a), flows_scale(a, c)
    ((64.0,), (0.015625,), None)
    """
    if len(a.phases) != len(b.phases):
        return None
    out = []
    for p, q in zip(a.phases, b.phases, strict=True):
        factor = 1.0 if p is q else _phase_scale(p, q)
        if factor is None:
            return None
        out.append(factor)
    return tuple(out)


def _phase_scale(p: Phase, q: Phase) -> float | None:
    """:func:`flows_scale` of one phase of each."""
    if isinstance(p, AllPairsPhase) or isinstance(q, AllPairsPhase):
        if not (isinstance(p, AllPairsPhase) and isinstance(q, AllPairsPhase)) or (
                (p.rewrite is None) != (q.rewrite is None) or p.flows != q.flows
                or len(p.blocks) != len(q.blocks)):
            return None
        if not all(np.array_equal(x.ranks, y.ranks)
                   for x, y in zip(p.blocks, q.blocks, strict=True)):
            return None
        if p.rewrite is None and not p.moved and not q.moved:  # the pairs' bytes say all
            return _bytes_scale(np.concatenate([x.bytes.astype(float) for x in p.blocks]),
                                np.concatenate([y.bytes.astype(float) for y in q.blocks]))
        if not p.is_listed:  # PXN's rewritten pairs: compared as listed, where the kept
            return None      # phase was routed pair by pair (listed: hash routing)
    if p.flows != q.flows or not (np.array_equal(p.src, q.src)
                                  and np.array_equal(p.dst, q.dst)):
        return None
    return _bytes_scale(p.bytes, q.bytes)


def _bytes_scale(a: np.ndarray, b: np.ndarray) -> float | None:
    """The power of two ``f`` with ``b`` equal to ``a * f`` bit for bit (1.0 where they
    are equal), or None: found from the first entry of ``a`` that is finite and not
    zero, then checked on every entry."""
    if len(a) != len(b):
        return None
    if _bits(a) == _bits(b):
        return 1.0
    normal = np.flatnonzero(np.isfinite(a) & (a != 0))
    if not len(normal):
        return None
    k = int(normal[0])
    factor = float(b[k]) / float(a[k])
    mantissa, _ = math.frexp(factor) if math.isfinite(factor) else (0.0, 0)
    if mantissa != 0.5:  # not a power of two
        return None
    if _bits(a * factor) != _bits(b):
        return None
    sizes = np.abs(a[normal])
    low, high = float(sizes.min()) * min(1.0, factor), float(sizes.max()) * max(1.0, factor)
    return factor if low >= SCALED_BYTES_RANGE[0] and high <= SCALED_BYTES_RANGE[1] else None


def _bits(values: np.ndarray) -> bytes:
    """The bit patterns of ``values`` (-0.0 is not +0.0 here)."""
    return np.ascontiguousarray(values, dtype=float).tobytes()
